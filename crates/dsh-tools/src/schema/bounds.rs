//! How large each tool argument may be: one bound per string argument, checked before the
//! argument is used (deserialised, compiled, matched, passed to the kernel), and shown in
//! the tool's JSON schema as `maxLength`.
//!
//! Anything that speaks MCP to dsh can send any JSON, so an argument is input, not a
//! promise. One past its bound is `INVALID_ARGS`, with a message naming the argument, its
//! size, the bound and what to do instead; nothing ran. The bounds:
//!
//! | argument | tools | at most (bytes) | why |
//! |---|---|---|---|
//! | `command` | `bash` | [`COMMAND_MAX_BYTES`] (131 071) | Linux's `MAX_ARG_STRLEN`: `bash -c COMMAND` cannot be executed with a longer one |
//! | `description` | `bash` | [`DESCRIPTION_MAX_BYTES`] (4 096) | a few words for the user |
//! | `justification` | `bash`, `write`, `edit` | [`JUSTIFICATION_MAX_BYTES`] (4 096) | one sentence for the user |
//! | `workdir`, `file_path`, `path` | all that take one | [`PATH_MAX_BYTES`] (4 096) | Linux's `PATH_MAX` |
//! | `pattern` | `glob` | [`GLOB_MAX_BYTES`] (4 096) | a glob is a line; a larger one only costs a larger automaton |
//! | `include` | `grep` | [`GLOB_MAX_BYTES`] (4 096) | the same glob |
//! | `pattern` | `grep` | [`GREP_PATTERN_MAX_BYTES`] (65 536) | room for long alternations; what compiling costs is bounded by the regex size limit, not by this |
//! | `content` | `write` | [`WRITE_MAX_BYTES`] (16 MiB) | the MCP transport's message cap |
//! | `old_string`, `new_string` | `edit` | [`EDIT_MAX_BYTES`] (16 MiB) | an edit writes no more than a `write` may |
//!
//! Sizes are bytes of UTF-8. A schema's `maxLength` counts characters, so it carries the
//! same number and is the looser of the two: a text of mostly multi-byte characters can
//! pass the schema and still be refused here. Keys a tool does not know are ignored, as
//! before, whatever their size: the MCP transport caps a whole message at 16 MiB, and the
//! session log keeps only a head of each long value.

use serde_json::Value;

/// `bash`'s `command`: 131 071 bytes. The command is one argument of `bash -c`, and
/// Linux's `MAX_ARG_STRLEN` (32 pages, 131 072 bytes, the terminating NUL included) is the
/// most one argument of `execve` may hold.
pub const COMMAND_MAX_BYTES: usize = 131_071;

/// `bash`'s `description`: 4 KiB.
pub const DESCRIPTION_MAX_BYTES: usize = 4096;

/// `justification` of an escalation (`bash`, `write`, `edit`): 4 KiB.
pub const JUSTIFICATION_MAX_BYTES: usize = 4096;

/// A path argument (`file_path`, `workdir`, `path`): 4 KiB, Linux's `PATH_MAX`, the
/// limit the filesystem seam applies too.
pub const PATH_MAX_BYTES: usize = 4096;

/// A glob (`glob`'s `pattern`, `grep`'s `include`): 4 KiB. The worst globs of that size
/// (4 096 `?` or `*`) compile in under 0.1 s in a debug build; the regex size limit is
/// only reached near 256 KiB of `?`.
pub const GLOB_MAX_BYTES: usize = 4096;

/// `grep`'s `pattern`: 64 KiB, room for a long alternation of names (a guess at the
/// largest a model needs). It bounds the text, not the cost of compiling it: that is
/// bounded by `grep-regex`'s size limit (100 MiB of compiled program), which a 14-byte
/// `\w{1000}{100}` reaches as surely as 64 KiB of `\w` (measured: 9-10 s of one thread
/// in a debug build, then `SEARCH_INVALID_PATTERN`).
pub const GREP_PATTERN_MAX_BYTES: usize = 64 << 10;

/// `write`'s `content`: 16 MiB, what one MCP message can carry
/// (`dsh_mcp::MAX_MESSAGE_BYTES`).
pub const WRITE_MAX_BYTES: usize = 16 << 20;

/// `edit`'s `old_string` and `new_string`: 16 MiB each, as [`WRITE_MAX_BYTES`].
pub const EDIT_MAX_BYTES: usize = WRITE_MAX_BYTES;

pub use dsh_core::QUOTED_MAX_CHARS;

/// The bound of one string argument.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    /// The argument's name.
    pub arg: &'static str,
    /// The most bytes it may have.
    pub max: usize,
    /// What to do instead, for the error message.
    pub advice: &'static str,
}

/// An argument type whose string arguments are bounded.
pub(crate) trait Bounded {
    /// One [`Bound`] per string argument.
    const BOUNDS: &'static [Bound];
}

pub(crate) const PATH_ADVICE: &str = "no path on Linux is longer";

/// `path`'s bound, shared by the search tools.
pub(crate) const SEARCH_PATH: Bound = Bound {
    arg: "path",
    max: PATH_MAX_BYTES,
    advice: PATH_ADVICE,
};

/// `file_path`'s bound, shared by the file tools.
pub(crate) const FILE_PATH: Bound = Bound {
    arg: "file_path",
    max: PATH_MAX_BYTES,
    advice: PATH_ADVICE,
};

/// `command`'s bound, shared by one-shot and persistent `bash`.
pub(crate) const COMMAND: Bound = Bound {
    arg: "command",
    max: COMMAND_MAX_BYTES,
    advice: "no single argument of a program can be longer on Linux; write a long script \
             to a file and run the file",
};

/// `description`'s bound, shared by one-shot and persistent `bash`.
pub(crate) const DESCRIPTION: Bound = Bound {
    arg: "description",
    max: DESCRIPTION_MAX_BYTES,
    advice: "say what the command does in a few words",
};

/// `workdir`'s bound, shared by one-shot and persistent `bash`.
pub(crate) const WORKDIR: Bound = Bound {
    arg: "workdir",
    max: PATH_MAX_BYTES,
    advice: PATH_ADVICE,
};

/// `justification`'s bound, shared by the tools that escalate.
pub(crate) const JUSTIFICATION: Bound = Bound {
    arg: "justification",
    max: JUSTIFICATION_MAX_BYTES,
    advice: "say why in one sentence",
};

/// `INVALID_ARGS` for the first argument of `args` that is a string over its bound.
pub(crate) fn check(args: &Value, bounds: &[Bound]) -> Result<(), dsh_core::HarnessError> {
    for b in bounds {
        if let Some(s) = args.get(b.arg).and_then(Value::as_str) {
            if s.len() > b.max {
                return Err(crate::invalid_args(format!(
                    "{} is {} bytes; the limit is {} bytes: {}",
                    b.arg,
                    s.len(),
                    b.max,
                    b.advice
                )));
            }
        }
    }
    Ok(())
}

/// `schema` with `maxLength` set on each bounded property.
pub(crate) fn with_max_lengths(mut schema: Value, bounds: &[Bound]) -> Value {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for b in bounds {
            if let Some(Value::Object(p)) = props.get_mut(b.arg) {
                p.insert("maxLength".into(), b.max.into());
            }
        }
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const B: &[Bound] = &[
        Bound {
            arg: "a",
            max: 4,
            advice: "use less",
        },
        FILE_PATH,
    ];

    #[test]
    fn an_argument_at_its_bound_passes_and_one_byte_more_is_invalid_args() {
        assert!(check(&json!({"a": "abcd"}), B).is_ok());
        let e = check(&json!({"a": "abcde"}), B).expect_err("over");
        assert_eq!(e.code(), dsh_core::ErrorCode::InvalidArgs);
        assert_eq!(e.message(), "a is 5 bytes; the limit is 4 bytes: use less");
    }

    #[test]
    fn bounds_count_bytes_not_characters() {
        // Three characters, six bytes.
        let e = check(&json!({"a": "ééé"}), B).expect_err("over");
        assert_eq!(e.message(), "a is 6 bytes; the limit is 4 bytes: use less");
    }

    #[test]
    fn a_path_over_path_max_is_refused_and_other_types_and_unknown_keys_are_left_alone() {
        let long = "p".repeat(PATH_MAX_BYTES + 1);
        let e = check(&json!({"file_path": long}), B).expect_err("over");
        assert_eq!(
            e.message(),
            "file_path is 4097 bytes; the limit is 4096 bytes: no path on Linux is longer"
        );
        assert!(check(&json!({"file_path": "p".repeat(PATH_MAX_BYTES)}), B).is_ok());
        // A non-string is the deserialiser's to refuse; an unknown key is ignored.
        assert!(check(&json!({"a": 123_456, "zzz": "z".repeat(1 << 20)}), B).is_ok());
    }

    #[test]
    fn the_schema_carries_each_bound_as_max_length() {
        let schema = json!({"properties": {"a": {"type": "string"}, "b": {"type": "integer"}}});
        assert_eq!(
            with_max_lengths(schema, B),
            json!({"properties": {"a": {"type": "string", "maxLength": 4}, "b": {"type": "integer"}}})
        );
    }

    #[test]
    fn a_long_quoted_message_keeps_its_head_and_its_size() {
        assert_eq!(dsh_core::quoted("short"), "short");
        let long = "é".repeat(QUOTED_MAX_CHARS + 1);
        assert_eq!(
            dsh_core::quoted(&long),
            format!("{}… (1002 bytes in all)", "é".repeat(QUOTED_MAX_CHARS))
        );
    }
}

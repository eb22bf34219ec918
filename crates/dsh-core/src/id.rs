//! Branded id newtypes, all made by one macro so they behave alike.

/// Declares an opaque string id newtype: `Clone + Eq + Hash + Ord + Display`, built with
/// `new`, read with `as_str`. Consumers never parse an id; they only compare and print it.
///
/// ```
/// dsh_core::id_type! {
///     /// Names one background job.
///     pub struct JobId;
/// }
/// let id = JobId::new("bash-1");
/// assert_eq!(id.as_str(), "bash-1");
/// assert_eq!(id.to_string(), "bash-1");
/// ```
#[macro_export]
macro_rules! id_type {
    ($(#[$meta:meta])* $vis:vis struct $name:ident;) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name(::std::sync::Arc<str>);

        impl $name {
            /// Wraps `value` as this id.
            pub fn new(value: impl ::std::convert::Into<::std::sync::Arc<str>>) -> Self {
                $name(value.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type! {
    /// Names one dsh session (one agent conversation, one MCP connection).
    pub struct SessionId;
}

id_type! {
    /// Names one tool call within a session.
    pub struct CallId;
}

//! The read-before-edit memory: what each session last saw of each file, so a write or
//! an edit changes only a file the session has seen as it is now (the file tools keep one
//! per World, whatever the provider).
//!
//! It is bounded: past [`OBSERVATIONS_MAX`] entries the oldest is forgotten (its file must
//! be read again before it is changed, which the error says), so a session of 100 000
//! calls over as many files costs what one of 10 000 does. A session the World has not
//! seen before is seeded once from its log (the typed `seen` record of each tool result,
//! the newest of a file winning), so a resumed session, or one `dsh tool` call after
//! another, keeps its reads.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use crate::FsVersion;
use dsh_core::journal::{Event, EventKind, Record, SeenRecord};
use dsh_core::SessionId;

/// How many (session, file) entries are remembered.
pub const OBSERVATIONS_MAX: usize = 10_000;

/// What a session last saw of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// It was there, at this version.
    Present(FsVersion),
    /// It was not there.
    Absent,
}

/// What a file tool saw of a file: its key and its version then. The one form the
/// memory is fed from, live and from the log's typed record ([`SeenRecord`]) when a
/// session is resumed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The file's stable key.
    pub key: PathBuf,
    /// Its version on disk when the tool saw it.
    pub version: FsVersion,
}

impl Seen {
    /// The log's record of it. A key that is not UTF-8 is logged lossily, so it seeds
    /// nothing (that file must be read again after a resume).
    pub fn to_record(&self) -> SeenRecord {
        SeenRecord {
            key: self.key.to_string_lossy().into_owned().into(),
            version: self.version.as_str().into(),
        }
    }

    /// What a logged record says was seen, when the log kept it whole.
    pub fn from_record(r: &SeenRecord) -> Option<Seen> {
        Some(Seen {
            key: PathBuf::from(r.key.whole()?),
            version: FsVersion::from_token(r.version.whole()?),
        })
    }
}

type Key = (SessionId, PathBuf);

/// See the [module docs](self).
#[derive(Default)]
pub struct Observations {
    /// Each entry with the stamp of its last change.
    map: HashMap<Key, (u64, Observation)>,
    /// Entries in the order of their changes (a stale stamp is skipped when evicting).
    order: VecDeque<(Key, u64)>,
    stamp: u64,
    /// Sessions seeded from their log already.
    seeded: HashSet<SessionId>,
}

impl Observations {
    /// Records that `session` saw `o` at `key`, forgetting the oldest entry past the
    /// bound.
    pub fn observe(&mut self, session: &SessionId, key: &Path, o: Observation) {
        self.stamp += 1;
        let k = (session.clone(), key.to_path_buf());
        self.map.insert(k.clone(), (self.stamp, o));
        self.order.push_back((k, self.stamp));
        while self.map.len() > OBSERVATIONS_MAX {
            let Some((old, stamp)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|(s, _)| *s == stamp) {
                self.map.remove(&old);
            }
        }
        // Stale order entries (of keys observed again) are dropped once they outnumber the
        // live ones: a file read 100 000 times is one entry, not 100 000.
        if self.order.len() > 2 * self.map.len() + 16 {
            let map = &self.map;
            self.order
                .retain(|(k, s)| map.get(k).is_some_and(|(live, _)| live == s));
        }
    }

    /// What `session` last saw at `key`, if it is remembered.
    pub fn observed(&self, session: &SessionId, key: &Path) -> Option<Observation> {
        self.map
            .get(&(session.clone(), key.to_path_buf()))
            .map(|(_, o)| o.clone())
    }

    /// Whether `session` still needs seeding from its log.
    pub fn needs_seed(&self, session: &SessionId) -> bool {
        !self.seeded.contains(session)
    }

    /// Seeds `session` from its log's `events` (oldest first): the file each result saw
    /// ([`SeenRecord`]), the newest record of a file winning. Entries this World recorded
    /// meanwhile are newer and stay.
    pub fn seed(&mut self, session: &SessionId, events: &[Event]) {
        if !self.seeded.insert(session.clone()) {
            return;
        }
        if self.seeded.len() > OBSERVATIONS_MAX {
            // Forgetting which sessions were seeded only costs a second seeding.
            self.seeded.clear();
            self.seeded.insert(session.clone());
        }
        // The log's last version of each file: a read, then an edit, then another edit
        // must leave the second edit's version, not the read's.
        let mut last: std::collections::HashMap<PathBuf, FsVersion> = Default::default();
        let mut order = Vec::new();
        for e in events {
            if e.kind != EventKind::ToolResult {
                continue;
            }
            // An event that cannot be read seeds nothing: that file must be read again.
            let Ok(Record::ToolResult(r)) = e.record() else {
                continue;
            };
            // Whatever the call's outcome: what it saw is what the live memory recorded.
            let Some(seen) = r.seen.as_deref().and_then(Seen::from_record) else {
                continue;
            };
            let Seen { key, version } = seen;
            if last.insert(key.clone(), version).is_none() {
                order.push(key);
            }
        }
        for key in order {
            // What this process observed already is newer than the log.
            let k = (session.clone(), key);
            if self.map.contains_key(&k) {
                continue;
            }
            if let Some(version) = last.remove(&k.1) {
                self.observe(session, &k.1, Observation::Present(version));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entry_goes_first_past_the_bound() {
        let mut o = Observations::default();
        let s = SessionId::new("s");
        for i in 0..OBSERVATIONS_MAX + 10 {
            o.observe(&s, Path::new(&format!("/f{i}")), Observation::Absent);
            // One file seen again and again stays.
            o.observe(&s, Path::new("/hot"), Observation::Absent);
        }
        assert_eq!(o.map.len(), OBSERVATIONS_MAX);
        assert!(o.order.len() <= 2 * OBSERVATIONS_MAX + 17);
        // A file seen again and again is one entry, in the order as in the map.
        let mut one = Observations::default();
        for _ in 0..1000 {
            one.observe(&s, Path::new("/hot"), Observation::Absent);
        }
        assert!(one.order.len() <= 18, "{}", one.order.len());
        assert!(o.observed(&s, Path::new("/hot")).is_some());
        assert!(o.observed(&s, Path::new("/f0")).is_none());
        assert!(o
            .observed(&s, Path::new(&format!("/f{}", OBSERVATIONS_MAX + 9)))
            .is_some());
    }

    /// A logged `tool/result` event that saw `seen` (`failed`: an error result).
    fn result(seq: u64, seen: Option<SeenRecord>, failed: bool) -> Event {
        let r = Record::ToolResult(dsh_core::journal::ToolResultRecord {
            is_error: failed,
            seen: seen.map(Box::new),
            ..Default::default()
        });
        Event {
            session: SessionId::new("s"),
            seq,
            time_ms: 0,
            kind: EventKind::ToolResult,
            data: r.data(),
        }
    }

    // What the tools record is what seeding reads back, the newest record of a file
    // winning, whatever the call's outcome; a key the log cut seeds nothing.
    #[test]
    fn seeding_reads_the_typed_record_newest_first() {
        let seen = |v: &str| Seen {
            key: PathBuf::from("/w/a.txt"),
            version: FsVersion::from_token(v),
        };
        assert_eq!(Seen::from_record(&seen("1").to_record()), Some(seen("1")));
        let cut = SeenRecord {
            key: dsh_core::journal::Logged::Cut {
                head: "/w/".into(),
                bytes: 9000,
                sha256: "0".repeat(64),
            },
            version: "3".into(),
        };
        let events = [
            result(1, Some(seen("1").to_record()), false),
            result(2, None, false),
            result(3, Some(seen("2").to_record()), true),
            result(4, Some(cut), false),
        ];
        let s = SessionId::new("s");
        let mut o = Observations::default();
        o.seed(&s, &events);
        assert_eq!(
            o.observed(&s, Path::new("/w/a.txt")),
            Some(Observation::Present(FsVersion::from_token("2")))
        );
        assert_eq!(o.map.len(), 1, "the cut key seeds nothing");
    }
}

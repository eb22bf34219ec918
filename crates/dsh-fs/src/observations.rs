//! The read-before-edit memory: what each session last saw of each file, so a write or
//! an edit changes only a file the session has seen as it is now (the file tools keep one
//! per World, whatever the provider).
//!
//! It is bounded: past [`OBSERVATIONS_MAX`] entries the oldest is forgotten (its file must
//! be read again before it is changed, which the error says), so a session of 100 000
//! calls over as many files costs what one of 10 000 does. A session the World has not
//! seen before is seeded once from its log (its last successful `read`, `write` and
//! `edit` results), so a resumed session, or one `dsh tool` call after another, keeps its
//! reads.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use crate::FsVersion;
use dsh_core::journal::{Event, EventKind, Record};
use dsh_core::SessionId;
use serde_json::Value;

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

/// What a file tool saw of a file, as its result's facts say it (`key`, `version`): the
/// one form the tools write and the log is read back from, so a session resumed from its
/// log knows what it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The file's stable key.
    pub key: PathBuf,
    /// Its version on disk when the tool saw it.
    pub version: FsVersion,
}

impl Seen {
    /// Adds `key` and `version` to a result's `facts` (a JSON object; anything else is
    /// left as it is).
    pub fn add_to(&self, facts: &mut Value) {
        if let Value::Object(map) = facts {
            map.insert(
                "key".into(),
                Value::from(self.key.to_string_lossy().into_owned()),
            );
            map.insert("version".into(), Value::from(self.version.as_str()));
        }
    }

    /// What a result's `facts` say was seen, when they say it.
    pub fn of(facts: &Value) -> Option<Seen> {
        Some(Seen {
            key: PathBuf::from(facts.get("key")?.as_str()?),
            version: FsVersion::from_token(facts.get("version")?.as_str()?),
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

    /// Seeds `session` from its log's `events` (oldest first): each successful result that
    /// names a file's key and version. Entries this World recorded meanwhile are newer and
    /// stay.
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
            let failed = r.failed();
            let Some(seen) = r.meta.filter(|_| !failed).as_ref().and_then(Seen::of) else {
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

    // What the tools write is what seeding reads: one form, both ways.
    #[test]
    fn what_a_result_says_it_saw_reads_back() {
        let seen = Seen {
            key: PathBuf::from("/w/a.txt"),
            version: FsVersion::from_token("1:2:3:4:5"),
        };
        let mut facts = serde_json::json!({"path": "a.txt", "lines": 3});
        seen.add_to(&mut facts);
        assert_eq!(Seen::of(&facts), Some(seen.clone()));
        assert_eq!(facts["path"], "a.txt");
        let mut text = Value::from("not facts");
        seen.add_to(&mut text);
        assert_eq!(Seen::of(&text), None);
        assert_eq!(Seen::of(&serde_json::json!({"key": "/w/a.txt"})), None);
    }
}

//! `basic_auth_users`: HTTP basic authentication against bcrypt hashes.
//!
//! bcrypt is slow on purpose (tens of milliseconds at the usual cost), and Prometheus sends the
//! same credentials every scrape, so each answer is kept, keyed by a SHA-256 of the user, the
//! password and the hash it was checked against: a changed hash (a reload) never meets an old
//! answer, and no password is kept in the clear. A name that is no user still pays one bcrypt,
//! against a user's hash, so that the time of a refusal does not tell which names exist.

use std::collections::HashMap;

use parking_lot::Mutex;

/// The most answers kept; past it the cache starts over, so that a flood of made-up
/// credentials costs bcrypt time, not memory.
const MAX_KEPT: usize = 1024;

/// The users and their hashes, and the answers given so far.
#[derive(Debug, Default)]
pub struct BasicUsers {
    users: Vec<(String, String)>,
    answers: Mutex<HashMap<[u8; 32], bool>>,
}

impl BasicUsers {
    /// Users with these bcrypt hashes (checked by the loader).
    pub(super) fn new(users: Vec<(String, String)>) -> Self {
        Self {
            users,
            answers: Mutex::default(),
        }
    }

    /// Whether basic authentication is configured at all.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `password` is `user`'s. Blocking (bcrypt) the first time a pair is seen: call it
    /// off the server's threads.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        let Some((_, first_hash)) = self.users.first() else {
            return false;
        };
        let hash = self
            .users
            .iter()
            .find(|(name, _)| name == user)
            .map(|(_, hash)| hash.as_str());
        let mut key = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [user, password, hash.unwrap_or_default()] {
            key.update(part.as_bytes());
            key.update(&[0]);
        }
        let mut digest = [0; 32];
        digest.copy_from_slice(key.finish().as_ref());
        if let Some(known) = self.answers.lock().get(&digest) {
            return *known;
        }
        let answer = match hash {
            Some(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            None => {
                let _ = bcrypt::verify(password, first_hash);
                false
            }
        };
        let mut answers = self.answers.lock();
        if answers.len() >= MAX_KEPT {
            answers.clear();
        }
        answers.insert(digest, answer);
        answer
    }
}

/// Why `hash` is not a bcrypt hash, if it is not one.
pub(super) fn check_hash(hash: &str) -> Result<(), String> {
    hash.parse::<bcrypt::HashParts>().map(drop).map_err(|e| {
        format!(
            "not a bcrypt hash ({e}): make one with `htpasswd -nBC 10 USER` and keep what follows \
             the colon"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_against_the_hash_and_remembers_the_answer() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let users = BasicUsers::new(vec![("prometheus".into(), hash.clone())]);
        assert!(users.verify("prometheus", "s3cret"));
        assert!(!users.verify("prometheus", "wrong"));
        assert!(!users.verify("nobody", "s3cret"));
        assert_eq!(users.answers.lock().len(), 3);
        // Remembered: asked again, the same answers without another entry.
        assert!(users.verify("prometheus", "s3cret"));
        assert!(!users.verify("prometheus", "wrong"));
        assert_eq!(users.answers.lock().len(), 3);
        assert!(check_hash(&hash).is_ok());
        assert!(check_hash("s3cret").unwrap_err().contains("htpasswd"));
        assert!(!BasicUsers::default().verify("prometheus", "s3cret"));
    }
}

//! The API's bearer tokens: operator and read roles, named, given on the command line or read
//! from files (read again on every reload). What each role may do is `auth`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read only.
    Read,
    /// Read and change.
    Operator,
}

impl Role {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operator => "operator",
        }
    }
}

/// One bearer token.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Credential {
    /// Shown in the audit log; the token itself never is.
    pub(super) name: String,
    secret: String,
    pub(super) role: Role,
}

/// Every token the API accepts, replaced whole on a reload.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials(Vec<Credential>);

impl Credentials {
    pub(super) fn has(&self, role: Role) -> bool {
        self.0.iter().any(|c| c.role == role)
    }

    /// The credential whose token was presented. Every token is compared in full, each without
    /// an early exit, so the time taken reveals neither a prefix nor which token matched.
    pub(super) fn find(&self, presented: &str) -> Option<&Credential> {
        let mut found = None;
        for credential in &self.0 {
            if constant_time_eq(presented.as_bytes(), credential.secret.as_bytes()) {
                found = Some(credential);
            }
        }
        found
    }

    /// The names and roles, for the log.
    fn describe(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|c| format!("{} ({})", c.name, c.role.as_str()))
            .collect()
    }
}

/// Where the tokens come from: the command line and files.
#[derive(Clone, Debug, Default)]
pub struct TokenSources {
    /// `--api-token [NAME=]TOKEN`, repeatable.
    pub operator: Vec<String>,
    /// `--api-token-file PATH`, repeatable.
    pub operator_files: Vec<PathBuf>,
    /// `--read-token [NAME=]TOKEN`, repeatable.
    pub read: Vec<String>,
    /// `--read-token-file PATH`, repeatable.
    pub read_files: Vec<PathBuf>,
}

/// Why the tokens could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A token file could not be read.
    #[error("token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A token file holds no token.
    #[error("token file {0} holds no token")]
    EmptyFile(PathBuf),
    /// A token is empty, or its name is.
    #[error("{0}: an empty token is no secret")]
    Empty(String),
}

impl TokenSources {
    /// Reads every token: each value (and each line of each file that is neither empty nor a
    /// `#` comment) is `TOKEN` or `NAME=TOKEN`; an unnamed token is named after its role.
    ///
    /// # Errors
    /// A file that cannot be read or holds no token, or an empty token.
    pub fn load(&self) -> Result<Credentials, TokenError> {
        let mut credentials = Vec::new();
        for (values, files, role) in [
            (&self.operator, &self.operator_files, Role::Operator),
            (&self.read, &self.read_files, Role::Read),
        ] {
            for value in values {
                credentials.push(parse(value, role, "a token on the command line")?);
            }
            for path in files {
                let lines = read_file(path)?;
                for line in lines {
                    credentials.push(parse(&line, role, &path.display().to_string())?);
                }
            }
        }
        Ok(Credentials(credentials))
    }
}

fn read_file(path: &Path) -> Result<Vec<String>, TokenError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
        path: path.to_owned(),
        source,
    })?;
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if lines.is_empty() {
        return Err(TokenError::EmptyFile(path.to_owned()));
    }
    Ok(lines)
}

/// `TOKEN` or `NAME=TOKEN`. A name is `[A-Za-z0-9._-]`, at most 64 long; anything else before
/// the first `=` (or nothing after it, as in base64 padding) makes the whole value the token.
fn parse(value: &str, role: Role, whence: &str) -> Result<Credential, TokenError> {
    let named = value.split_once('=').filter(|(name, secret)| {
        !name.is_empty()
            && name.len() <= 64
            && !secret.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    });
    let (name, secret) = named.unwrap_or((role.as_str(), value));
    if secret.trim().is_empty() {
        return Err(TokenError::Empty(whence.to_owned()));
    }
    Ok(Credential {
        name: name.to_owned(),
        secret: secret.to_owned(),
        role,
    })
}

/// The API's tokens, shared with the daemon, which replaces them on a reload.
#[derive(Clone, Default)]
pub struct Tokens(Arc<ArcSwap<Credentials>>);

impl Tokens {
    /// Serves `credentials` until the next reload.
    pub fn new(credentials: Credentials) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(credentials)))
    }

    /// The tokens in force now.
    pub(super) fn load(&self) -> arc_swap::Guard<Arc<Credentials>> {
        self.0.load()
    }

    /// Whether any change can be made with a token (else only from loopback, if at all).
    pub fn has_operator(&self) -> bool {
        self.0.load().has(Role::Operator)
    }

    /// Whether any token is configured, of either role.
    pub fn has_any(&self) -> bool {
        !self.0.load().0.is_empty()
    }

    /// Reads the sources again; keeps the tokens in force when they cannot be read.
    pub fn reload(&self, sources: &TokenSources) {
        match sources.load() {
            Ok(credentials) if credentials == **self.0.load() => {}
            Ok(credentials) => {
                let described = credentials.describe();
                // In force before it is said: whoever reads the line finds the new tokens.
                self.0.store(Arc::new(credentials));
                tracing::info!(tokens = ?described, "api tokens reloaded");
            }
            Err(e) => tracing::error!(
                error = %e,
                "the api tokens cannot be read again; the tokens in force stay"
            ),
        }
    }
}

/// Compares without an early exit, so response times do not reveal a token prefix.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(operator: &[&str], read: &[&str]) -> Credentials {
        TokenSources {
            operator: operator.iter().map(|s| (*s).to_owned()).collect(),
            read: read.iter().map(|s| (*s).to_owned()).collect(),
            ..TokenSources::default()
        }
        .load()
        .unwrap()
    }

    #[test]
    fn a_value_is_named_only_when_its_name_is_one() {
        let creds = credentials(&["ci=a", "abc=", "a b=c", "=x", "x=y=z"], &[]);
        let parsed: Vec<(&str, &str)> = creds
            .0
            .iter()
            .map(|c| (c.name.as_str(), c.secret.as_str()))
            .collect();
        assert_eq!(
            parsed,
            [
                ("ci", "a"),
                ("operator", "abc="),
                ("operator", "a b=c"),
                ("operator", "=x"),
                ("x", "y=z")
            ]
        );
        let empty = TokenSources {
            read: vec!["name= ".into()],
            ..TokenSources::default()
        };
        assert!(matches!(empty.load(), Err(TokenError::Empty(_))));
    }

    #[test]
    fn files_hold_a_token_a_line_and_must_hold_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "# rotated monthly\n\n  deploy=s3cret  \nbare\n").unwrap();
        let sources = TokenSources {
            operator_files: vec![path.clone()],
            ..TokenSources::default()
        };
        let creds = sources.load().unwrap();
        assert_eq!(
            creds.describe(),
            ["deploy (operator)", "operator (operator)"]
        );
        assert!(creds.find("s3cret").is_some() && creds.find("bare").is_some());
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(matches!(sources.load(), Err(TokenError::EmptyFile(_))));
        let missing = TokenSources {
            read_files: vec![dir.path().join("missing")],
            ..TokenSources::default()
        };
        assert!(matches!(missing.load(), Err(TokenError::Read { .. })));
    }

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}

//! Request headers whose values are never shown, and `${VAR}` expansion to fill them.
//!
//! Probe headers routinely carry credentials (`Authorization: Bearer ...`, API keys). A spec is
//! printed with `{:?}` in logs and tests, compared on reload and may be rendered by an API, so the
//! values are kept in [`RequestHeaders`], whose `Debug` shows the header names only. Every value
//! is treated as secret, not just the ones that look like credentials: guessing wrong once leaks a
//! token, and nothing needs to see a probe's header values except the server.
//!
//! Secrets are meant to come from the environment rather than from configuration files, hence
//! [`expand_env`]: its errors name the variable, never a value.

use std::fmt;

use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The headers a probe sends, values redacted from `Debug`.
///
/// Values are also marked sensitive for the HTTP stack (`HeaderValue::set_sensitive`), so they
/// are redacted from its own debug output too.
#[derive(Clone, Default, PartialEq)]
pub struct RequestHeaders(HeaderMap);

/// Why a header cannot be added to [`RequestHeaders`]. Never contains the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidHeader {
    /// Not a valid HTTP header name.
    #[error("invalid header name {0:?}")]
    Name(String),
    /// The value has characters HTTP does not allow (control characters, newlines).
    #[error("invalid value for header {0:?}: control characters are not allowed")]
    Value(String),
    /// The probe manages these itself: framing headers would corrupt the request, and
    /// connection handling is `fresh_connection`'s job.
    #[error("header {0:?} is managed by the probe and cannot be set")]
    Managed(String),
}

impl RequestHeaders {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a header (a repeated name adds another value).
    ///
    /// # Errors
    /// [`InvalidHeader`] for an invalid name or value, or for `Content-Length`,
    /// `Transfer-Encoding` or `Connection`, which the probe manages.
    pub fn append(&mut self, name: &str, value: &str) -> Result<(), InvalidHeader> {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| InvalidHeader::Name(name.into()))?;
        if [
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::CONNECTION,
        ]
        .contains(&name)
        {
            return Err(InvalidHeader::Managed(name.as_str().into()));
        }
        let mut value =
            HeaderValue::from_str(value).map_err(|_| InvalidHeader::Value(name.as_str().into()))?;
        value.set_sensitive(true);
        self.0.append(name, value);
        Ok(())
    }

    /// The number of header values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The headers themselves, for sending. Handle with care: the values are secrets.
    pub fn expose(&self) -> &HeaderMap {
        &self.0
    }
}

impl fmt::Debug for RequestHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name.as_str(), Redacted)))
            .finish()
    }
}

/// Stands in for a secret in `Debug` output.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Why [`expand_env`] failed. Names the variable, never a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// The variable is not set (or not valid UTF-8).
    #[error("environment variable {0} is not set")]
    Unset(String),
    /// `${` without a closing `}`.
    #[error("unterminated \"${{\" at offset {0}")]
    Unterminated(usize),
    /// The name is not `[A-Za-z_][A-Za-z0-9_]*`.
    #[error("invalid variable name {0:?} in \"${{...}}\"")]
    BadName(String),
}

/// Replaces every `${NAME}` in `template` with `lookup(NAME)`; `$$` is a literal `$`.
///
/// A `$` followed by anything else is kept as is, so values such as `pa$word` need no escaping.
/// Expansion happens once, when the probe's spec is built: the spec holds the resulting value.
///
/// # Errors
/// [`ExpandError`] for an unset variable, an unterminated `${` or an invalid name.
pub fn expand_env(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('{') {
            let offset = template.len() - rest.len() + dollar;
            let end = inner.find('}').ok_or(ExpandError::Unterminated(offset))?;
            let name = &inner[..end];
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(ExpandError::BadName(name.into()));
            }
            out.push_str(&lookup(name).ok_or_else(|| ExpandError::Unset(name.into()))?);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cr3t".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_variables_and_escapes() {
        assert_eq!(expand_env("Bearer ${TOKEN}", env).unwrap(), "Bearer s3cr3t");
        assert_eq!(
            expand_env("${TOKEN}${EMPTY}${TOKEN}", env).unwrap(),
            "s3cr3ts3cr3t"
        );
        assert_eq!(expand_env("$$${TOKEN} $x $", env).unwrap(), "$s3cr3t $x $");
        assert_eq!(expand_env("$${TOKEN}", env).unwrap(), "${TOKEN}");
        assert_eq!(expand_env("plain", env).unwrap(), "plain");
    }

    #[test]
    fn errors_name_the_variable_only() {
        assert_eq!(
            expand_env("a ${MISSING}", env),
            Err(ExpandError::Unset("MISSING".into()))
        );
        assert_eq!(
            expand_env("x${TOKEN", env),
            Err(ExpandError::Unterminated(1))
        );
        assert_eq!(
            expand_env("${1A}", env),
            Err(ExpandError::BadName("1A".into()))
        );
        assert_eq!(
            expand_env("${}", env),
            Err(ExpandError::BadName(String::new()))
        );
        assert_eq!(
            ExpandError::Unset("MISSING".into()).to_string(),
            "environment variable MISSING is not set"
        );
    }

    #[test]
    fn debug_never_shows_values() {
        let mut headers = RequestHeaders::new();
        headers.append("Authorization", "Bearer s3cr3t").unwrap();
        headers.append("X-Api-Key", "k3y").unwrap();
        let shown = format!("{headers:?}");
        assert_eq!(
            shown,
            r#"{"authorization": <redacted>, "x-api-key": <redacted>}"#
        );
        assert!(!format!("{:?}", headers.expose()).contains("s3cr3t"));
        assert_eq!(headers.len(), 2);
    }

    #[test]
    fn invalid_headers_are_rejected_without_their_value() {
        let mut headers = RequestHeaders::new();
        assert_eq!(
            headers.append("bad name", "v"),
            Err(InvalidHeader::Name("bad name".into()))
        );
        let err = headers.append("x-token", "s3cr3t\n").unwrap_err();
        assert!(!err.to_string().contains("s3cr3t"));
        assert_eq!(
            headers.append("Content-Length", "1"),
            Err(InvalidHeader::Managed("content-length".into()))
        );
    }
}

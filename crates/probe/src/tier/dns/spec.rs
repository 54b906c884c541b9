//! What a DNS probe is asked to do: which server to ask, the question, over which transport,
//! and what the reply must hold.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use hickory_resolver::proto::rr::{Name, RecordType};

use super::records::RecordRules;

/// The port a server is asked on when its address names none.
pub const DEFAULT_PORT: u16 = 53;

/// Limit on a compiled `re:` answer pattern, so a hostile pattern cannot take the engine's
/// memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The record types a DNS probe can ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DnsType {
    /// An IPv4 address. The default.
    #[default]
    A,
    /// An IPv6 address.
    Aaaa,
    /// An alias.
    Cname,
    /// A mail exchanger.
    Mx,
    /// Text.
    Txt,
    /// A service location.
    Srv,
    /// A name server.
    Ns,
    /// The start of a zone of authority.
    Soa,
    /// A pointer (reverse lookups).
    Ptr,
    /// Every record of the name (`ANY`): its answers are every record of the answer section.
    Any,
}

impl DnsType {
    /// Every type, in the order the documentation lists them.
    pub const ALL: [DnsType; 10] = [
        Self::A,
        Self::Aaaa,
        Self::Cname,
        Self::Mx,
        Self::Txt,
        Self::Srv,
        Self::Ns,
        Self::Soa,
        Self::Ptr,
        Self::Any,
    ];

    /// The type's mnemonic, as the configuration writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::A => "A",
            Self::Aaaa => "AAAA",
            Self::Cname => "CNAME",
            Self::Mx => "MX",
            Self::Txt => "TXT",
            Self::Srv => "SRV",
            Self::Ns => "NS",
            Self::Soa => "SOA",
            Self::Ptr => "PTR",
            Self::Any => "ANY",
        }
    }

    pub(crate) const fn record_type(self) -> RecordType {
        match self {
            Self::A => RecordType::A,
            Self::Aaaa => RecordType::AAAA,
            Self::Cname => RecordType::CNAME,
            Self::Mx => RecordType::MX,
            Self::Txt => RecordType::TXT,
            Self::Srv => RecordType::SRV,
            Self::Ns => RecordType::NS,
            Self::Soa => RecordType::SOA,
            Self::Ptr => RecordType::PTR,
            Self::Any => RecordType::ANY,
        }
    }
}

impl fmt::Display for DnsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record type name that is not one of [`DnsType::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown record type {0:?}")]
pub struct UnknownType(pub String);

impl FromStr for DnsType {
    type Err = UnknownType;

    /// The mnemonic in any case: `A`, `aaaa`, `Mx`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownType(s.to_owned()))
    }
}

/// How the query travels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DnsTransport {
    /// One datagram each way; a truncated reply is asked again over TCP. The default.
    #[default]
    Udp,
    /// A TCP connection, with the two-byte length prefix of RFC 1035 4.2.2.
    Tcp,
}

impl DnsTransport {
    /// Every transport.
    pub const ALL: [DnsTransport; 2] = [Self::Udp, Self::Tcp];

    /// The lowercase name the configuration uses.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

impl fmt::Display for DnsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reply's response code (RCODE), as a number with the names of RFC 1035 and RFC 2136.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rcode(pub u16);

impl Rcode {
    /// No error. The default expectation.
    pub const NOERROR: Self = Self(0);
    /// The name does not exist.
    pub const NXDOMAIN: Self = Self(3);
    /// The server failed to answer.
    pub const SERVFAIL: Self = Self(2);
    /// The server refused to answer.
    pub const REFUSED: Self = Self(5);

    /// The named codes, by value.
    pub const NAMES: [&'static str; 11] = [
        "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET",
        "NXRRSET", "NOTAUTH", "NOTZONE",
    ];

    /// The code's name, when it has one of [`Rcode::NAMES`].
    pub fn name(self) -> Option<&'static str> {
        Self::NAMES.get(usize::from(self.0)).copied()
    }
}

impl fmt::Display for Rcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "RCODE{}", self.0),
        }
    }
}

/// A response code name that is not one of [`Rcode::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown rcode {0:?}")]
pub struct UnknownRcode(pub String);

impl FromStr for Rcode {
    type Err = UnknownRcode;

    /// One of [`Rcode::NAMES`], in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s.trim()))
            .and_then(|i| u16::try_from(i).ok())
            .map(Self)
            .ok_or_else(|| UnknownRcode(s.to_owned()))
    }
}

/// One value that must be among a reply's answers.
#[derive(Clone, Debug)]
pub enum AnswerMatch {
    /// An answer must equal this text (see [`AnswerMatch::matches`] for what equal means).
    Exact(String),
    /// An answer's text must match this regular expression (written `re:PATTERN`).
    Regex(regex::Regex),
}

impl PartialEq for AnswerMatch {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Exact(a), Self::Exact(b)) => a == b,
            (Self::Regex(a), Self::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl AnswerMatch {
    /// `re:PATTERN` as a regular expression, anything else as an exact value.
    ///
    /// # Errors
    /// The pattern after `re:` is not a valid regular expression (or compiles too large).
    pub fn parse(text: &str) -> Result<Self, regex::Error> {
        match text.strip_prefix("re:") {
            Some(pattern) => regex::RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map(Self::Regex),
            None => Ok(Self::Exact(text.trim().to_owned())),
        }
    }

    /// Whether `answer`, the text form of one answer of type `of` (see the tier's docs), is
    /// the value this asks for.
    ///
    /// An exact value is compared leniently where DNS itself is: addresses as addresses
    /// (`::1` equals `0::1`), names without regard to case or a trailing dot (`Mail.Test.`
    /// equals `mail.test`). TXT text is compared as it is. A regex sees the answer's text as
    /// shown, names without their trailing dot.
    pub fn matches(&self, answer: &str, of: DnsType) -> bool {
        match self {
            Self::Regex(re) => re.is_match(answer),
            Self::Exact(want) => match of {
                DnsType::Txt => want == answer,
                DnsType::A | DnsType::Aaaa => match (want.parse::<IpAddr>(), answer.parse()) {
                    (Ok(want), Ok::<IpAddr, _>(got)) => want == got,
                    _ => false,
                },
                _ => normalized(want).eq_ignore_ascii_case(&normalized(answer)),
            },
        }
    }
}

/// A record's text with each name's trailing dot dropped and spaces collapsed.
fn normalized(text: &str) -> String {
    text.split_whitespace()
        .map(|word| match word.strip_suffix('.') {
            Some(name) if !name.is_empty() => name,
            _ => word,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl fmt::Display for AnswerMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(text) => write!(f, "{text:?}"),
            Self::Regex(re) => write!(f, "/{}/", re.as_str()),
        }
    }
}

/// What the reply must hold.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsExpect {
    /// The response codes accepted, at least one. Default `[NOERROR]`.
    pub rcodes: Vec<Rcode>,
    /// Values that must each be among the answers.
    pub answers: Vec<AnswerMatch>,
    /// The fewest answers of the asked type; `None`: one when `NOERROR` is the only accepted
    /// rcode (a name that exists but has no such record is not an answer), none otherwise.
    pub min_answers: Option<u32>,
    /// Regexes over every record of each section, checked last.
    pub records: RecordRules,
}

impl Default for DnsExpect {
    fn default() -> Self {
        Self {
            rcodes: vec![Rcode::NOERROR],
            answers: Vec::new(),
            min_answers: None,
            records: RecordRules::default(),
        }
    }
}

impl DnsExpect {
    /// The fewest answers accepted, with the default filled in.
    pub fn min_answers(&self) -> u32 {
        self.min_answers
            .unwrap_or(u32::from(self.rcodes == [Rcode::NOERROR]))
    }
}

/// When a reply that meets the expectations is still degraded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsDegradedIf {
    /// The reply (with a TCP retry after truncation, if there was one) took longer than this.
    pub latency_over: Option<Duration>,
}

impl DnsDegradedIf {
    /// The reasons a reply that took `latency` is degraded; empty when it is not.
    pub(crate) fn reasons(&self, latency: Duration) -> Vec<String> {
        match self.latency_over {
            Some(limit) if latency > limit => vec![format!(
                "latency {}ms over {}",
                latency.as_millis(),
                humantime::format_duration(limit)
            )],
            _ => Vec::new(),
        }
    }
}

/// A DNS probe: one question to one server, judged by the reply's response code and answers.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsSpec {
    /// The server asked.
    pub server: SocketAddr,
    /// The name asked about, absolute.
    name: Name,
    /// The record type asked for.
    pub record_type: DnsType,
    /// How the query travels.
    pub transport: DnsTransport,
    /// What the reply must hold.
    pub expect: DnsExpect,
    /// When a good reply is still degraded.
    pub degraded_if: DnsDegradedIf,
    /// Whether the query asks the server to recurse (the RD bit). On by default: a probe of a
    /// resolver wants its answer; off, an authoritative server answers from its own zones.
    pub recursion_desired: bool,
}

/// A name a DNS probe cannot ask about.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid DNS name {name:?}: {reason}")]
pub struct InvalidName {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

impl DnsSpec {
    /// Asks `server` for the `record_type` records of `name`, over UDP, expecting `NOERROR`
    /// and at least one answer.
    ///
    /// `name` is always absolute: `orders.internal` asks about `orders.internal.`, never with
    /// a search domain appended, so the probe checks exactly the name written.
    ///
    /// # Errors
    /// `name` is empty or not a valid domain name.
    pub fn new(server: SocketAddr, name: &str, record_type: DnsType) -> Result<Self, InvalidName> {
        let invalid = |reason: String| InvalidName {
            name: name.to_owned(),
            reason,
        };
        let text = name.trim();
        if text.is_empty() || text == "." {
            return Err(invalid(
                "a probe asks about a name, not the root".to_owned(),
            ));
        }
        let mut parsed = Name::from_utf8(text).map_err(|e| invalid(e.to_string()))?;
        parsed.set_fqdn(true);
        Ok(Self {
            server,
            name: parsed,
            record_type,
            transport: DnsTransport::Udp,
            expect: DnsExpect::default(),
            degraded_if: DnsDegradedIf::default(),
            recursion_desired: true,
        })
    }

    /// The name asked about, without its trailing dot.
    pub fn name(&self) -> String {
        let text = self.name.to_ascii();
        text.strip_suffix('.').unwrap_or(&text).to_owned()
    }

    pub(crate) fn query_name(&self) -> &Name {
        &self.name
    }
}

/// A server address that is neither `IP:PORT` nor an IP.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid server address {0:?}: expected IP:PORT (such as 127.0.0.1:53 or [::1]:53) or an IP"
)]
pub struct InvalidServer(pub String);

/// A server address as the configuration writes it: `IP:PORT`, or an IP alone for port 53.
///
/// # Errors
/// The text is neither; a host name is refused too, since resolving the resolver would need
/// a resolver.
pub fn parse_server(text: &str) -> Result<SocketAddr, InvalidServer> {
    let text = text.trim();
    text.parse::<SocketAddr>()
        .or_else(|_| {
            let ip = text.strip_prefix('[').and_then(|t| t.strip_suffix(']'));
            ip.unwrap_or(text)
                .parse::<IpAddr>()
                .map(|ip| SocketAddr::new(ip, DEFAULT_PORT))
        })
        .map_err(|_| InvalidServer(text.to_owned()))
}

/// Why the system's resolver could not be found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SystemServerError {
    /// The system configuration (`/etc/resolv.conf`) could not be read.
    #[error("cannot read the system's resolver configuration: {0}")]
    Unreadable(String),
    /// It names no server.
    #[error("the system's resolver configuration names no nameserver")]
    NoServer,
}

/// The system's resolver: the first nameserver of its configuration (`/etc/resolv.conf`), on
/// the port it gives (53).
///
/// # Errors
/// The configuration cannot be read or names no server.
pub fn system_server() -> Result<SocketAddr, SystemServerError> {
    let (config, _) = hickory_resolver::system_conf::read_system_conf()
        .map_err(|e| SystemServerError::Unreadable(e.to_string()))?;
    let server = config
        .name_servers()
        .first()
        .ok_or(SystemServerError::NoServer)?;
    let port = server
        .connections
        .first()
        .map_or(DEFAULT_PORT, |connection| connection.port);
    Ok(SocketAddr::new(server.ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_rcodes_parse_in_any_case() {
        assert_eq!("aaaa".parse(), Ok(DnsType::Aaaa));
        assert_eq!(" Mx ".parse(), Ok(DnsType::Mx));
        assert!("AXFR".parse::<DnsType>().is_err());
        assert_eq!("nxdomain".parse(), Ok(Rcode::NXDOMAIN));
        assert_eq!("REFUSED".parse(), Ok(Rcode::REFUSED));
        assert!("NOPE".parse::<Rcode>().is_err());
        assert_eq!(Rcode(2).to_string(), "SERVFAIL");
        assert_eq!(Rcode(16).to_string(), "RCODE16");
    }

    #[test]
    fn min_answers_defaults_by_rcode() {
        assert_eq!(DnsExpect::default().min_answers(), 1);
        let nx = DnsExpect {
            rcodes: vec![Rcode::NXDOMAIN],
            ..DnsExpect::default()
        };
        assert_eq!(nx.min_answers(), 0);
        let explicit = DnsExpect {
            min_answers: Some(3),
            ..nx
        };
        assert_eq!(explicit.min_answers(), 3);
    }

    #[test]
    fn exact_answers_compare_as_dns_does() {
        let m = |s: &str| AnswerMatch::parse(s).unwrap();
        assert!(m("::1").matches("0:0::1", DnsType::Aaaa));
        assert!(!m("10.0.0.5").matches("10.0.0.6", DnsType::A));
        assert!(m("Mail.Test.").matches("mail.test", DnsType::Cname));
        assert!(m("mail.test").matches("mail.test", DnsType::Ptr));
        assert!(m("10 mail.test.").matches("10 mail.test", DnsType::Mx));
        assert!(
            m("ns.test. admin.test. 1 2 3 4 5")
                .matches("ns.test admin.test 1 2 3 4 5", DnsType::Soa)
        );
        assert!(!m("Hello").matches("hello", DnsType::Txt));
        assert!(m("re:^10\\.0\\.").matches("10.0.0.7", DnsType::A));
        assert!(AnswerMatch::parse("re:(").is_err());
    }

    #[test]
    fn servers_parse_with_or_without_a_port() {
        assert_eq!(
            parse_server("127.0.0.1:5353"),
            Ok("127.0.0.1:5353".parse().unwrap())
        );
        assert_eq!(parse_server("10.0.0.1"), Ok("10.0.0.1:53".parse().unwrap()));
        assert_eq!(parse_server("::1"), Ok("[::1]:53".parse().unwrap()));
        assert_eq!(parse_server("[::1]"), Ok("[::1]:53".parse().unwrap()));
        assert!(parse_server("dns.internal:53").is_err());
        assert!(parse_server("127.0.0.1:99999").is_err());
    }

    #[test]
    fn names_are_absolute_and_shown_without_the_dot() {
        let server = "127.0.0.1:53".parse().unwrap();
        let spec = DnsSpec::new(server, "orders.internal", DnsType::A).unwrap();
        assert!(spec.query_name().is_fqdn());
        assert_eq!(spec.name(), "orders.internal");
        assert_eq!(
            DnsSpec::new(server, "orders.internal.", DnsType::A).unwrap(),
            spec
        );
        assert!(DnsSpec::new(server, "", DnsType::A).is_err());
        assert!(DnsSpec::new(server, "a..b", DnsType::A).is_err());
    }
}

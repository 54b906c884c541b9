//! The DNS tier: one question to one server, judged by the reply's response code and answers.
//!
//! Messages are built and read with hickory-proto; the exchange is the prober's own, so that it
//! can say what went wrong at each step rather than "lookup failed":
//!
//! - **UDP** (the default): a connected socket, so the kernel passes on only the server's
//!   datagrams and reports an ICMP port unreachable as `refused`. The query is sent again at a
//!   third and at two thirds of the timeout, so a lost datagram does not fail the check. A
//!   reply with the TC (truncated) bit is asked again over TCP, within the same deadline.
//!   Queries carry no EDNS, so a reply larger than 512 bytes comes truncated and goes to TCP.
//! - **TCP**: a connection (reset on close, as the TCP tier does, so probes leave no
//!   `TIME_WAIT`), the query with its two-byte length prefix, the reply likewise.
//!
//! A reply counts only if it is a response with the query's id and question (an error reply
//! without a question section is accepted too: servers leave it out of FORMERR and the like).
//! Anything else is ignored and the probe keeps waiting: a stray or forged datagram is never
//! judged, and if nothing else comes the check times out saying how many were ignored.
//!
//! The answers judged are the records of the asked type in the answer section (a CNAME on the
//! way to an A record is not an A answer). Their text forms, as matched and shown: A and AAAA
//! the address; CNAME, NS and PTR the name, without its trailing dot; MX `PREF HOST`; TXT the
//! record's strings joined; SRV `PRIO WEIGHT PORT TARGET`; SOA `MNAME RNAME SERIAL REFRESH
//! RETRY EXPIRE MINIMUM`.
//!
//! Last, [`RecordRules`] judge every record of each section (answer, authority, additional) in
//! presentation format, whatever its type: what a regex over a whole `dig` line can say.

pub mod records;
pub(crate) mod spec;

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_resolver::proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_resolver::proto::rr::{DNSClass, Name, RData};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{Instant, timeout_at};

use crate::outcome::{CheckResult, DnsObserved, Failure, FailureReason, Observed, Verdict};
use crate::tier::probe::Probe;
use crate::tier::tcp::{CloseMode, connect};
pub use records::{RecordRules, SectionRules};
pub use spec::{
    AnswerMatch, DEFAULT_PORT, DnsDegradedIf, DnsExpect, DnsSpec, DnsTransport, DnsType,
    InvalidName, InvalidServer, Rcode, SystemServerError, UnknownRcode, UnknownType, parse_server,
    system_server,
};

/// How many times a UDP query is sent, evenly spread over the timeout.
const UDP_SENDS: u32 = 3;

/// The largest datagram read. Without EDNS a server sends at most 512 bytes; the slack takes a
/// server that ignores the limit.
const MAX_DATAGRAM: usize = 4096;

/// At most this many answers are shown in a failure's detail, each at most [`SHOWN_CHARS`].
const SHOWN_ANSWERS: usize = 8;
const SHOWN_CHARS: usize = 80;

/// Probes a DNS server as its [`DnsSpec`] says.
#[derive(Clone, Debug)]
pub struct DnsProbe {
    spec: DnsSpec,
}

/// A reply that matched the query.
struct Reply {
    rcode: Rcode,
    answers: Vec<String>,
    message: Message,
}

impl DnsProbe {
    /// A probe for `spec`.
    pub fn new(spec: DnsSpec) -> Self {
        Self { spec }
    }

    async fn run(&self, timeout: Duration, observed: &mut Observed) -> Result<Verdict, Failure> {
        let started = Instant::now();
        let deadline = started + timeout;
        let query = self.query();
        let wire = query
            .to_vec()
            .map_err(|e| Failure::new(FailureReason::Io, format_args!("encode the query: {e}")))?;
        let server = self.spec.server;
        observed.addr = Some(server.ip());
        // When the socket was ready to send: the phases split there, answered or not.
        let mut ready = started;
        let exchanged = self.exchange(&wire, &query, deadline, &mut ready).await;
        let latency = started.elapsed();
        let dns = observed.dns.insert(DnsObserved {
            connect: ready - started,
            request: latency.saturating_sub(ready - started),
            ..DnsObserved::default()
        });
        let message = exchanged?;
        dns.replied = true;
        dns.answer = message.answers.len();
        dns.authority = message.authorities.len();
        dns.additional = message.additionals.len();
        if self.spec.record_type == DnsType::Soa {
            dns.serial = Some(
                message
                    .answers
                    .iter()
                    .find_map(|r| match &r.data {
                        RData::SOA(soa) => Some(soa.serial),
                        _ => None,
                    })
                    .unwrap_or_default(),
            );
        }
        let reply = self.reply(message);
        self.judge(&reply)?;
        let reasons = self.spec.degraded_if.reasons(latency);
        Ok(if reasons.is_empty() {
            Verdict::Up
        } else {
            Verdict::Degraded(reasons)
        })
    }

    /// Sends `wire` over the spec's transport (UDP falling back on TCP for a truncated reply)
    /// and reads the reply; `ready` is set when a socket is ready to send.
    async fn exchange(
        &self,
        wire: &[u8],
        query: &Message,
        deadline: Instant,
        ready: &mut Instant,
    ) -> Result<Message, Failure> {
        let server = self.spec.server;
        match self.spec.transport {
            DnsTransport::Tcp => tcp_exchange(server, wire, query, deadline, ready).await,
            DnsTransport::Udp => {
                let reply = udp_exchange(server, wire, query, deadline, ready).await?;
                if !reply.metadata.truncation {
                    return Ok(reply);
                }
                tcp_exchange(server, wire, query, deadline, ready)
                    .await
                    .map_err(|f| Failure {
                        detail: format!("the reply over UDP was truncated; over TCP: {}", f.detail),
                        ..f
                    })
            }
        }
    }

    /// A recursive query for the spec's question, with a fresh random id.
    fn query(&self) -> Message {
        let mut message = Message::query();
        message.metadata.recursion_desired = self.spec.recursion_desired;
        let mut question = Query::query(
            self.spec.query_name().clone(),
            self.spec.record_type.record_type(),
        );
        question.set_query_class(DNSClass::IN);
        message.add_query(question);
        message
    }

    fn reply(&self, message: Message) -> Reply {
        let asked = self.spec.record_type.record_type();
        let any = self.spec.record_type == DnsType::Any;
        Reply {
            rcode: Rcode(u16::from(message.metadata.response_code)),
            answers: message
                .answers
                .iter()
                .filter(|r| (any || r.record_type() == asked) && r.dns_class == DNSClass::IN)
                .map(|r| answer_text(&r.data))
                .collect(),
            message,
        }
    }

    fn judge(&self, reply: &Reply) -> Result<(), Failure> {
        let expect = &self.spec.expect;
        let failed = |wanted: String| {
            Failure::new(
                FailureReason::Assertion,
                format_args!("expected {wanted}, got {}", describe(reply)),
            )
        };
        if !expect.rcodes.contains(&reply.rcode) {
            let names: Vec<String> = expect.rcodes.iter().map(ToString::to_string).collect();
            return Err(failed(format!("rcode {}", names.join(" or "))));
        }
        let of = self.spec.record_type;
        let missing: Vec<String> = expect
            .answers
            .iter()
            .filter(|m| !reply.answers.iter().any(|a| m.matches(a, of)))
            .map(ToString::to_string)
            .collect();
        if !missing.is_empty() {
            return Err(failed(format!(
                "{} among the {of} answers",
                missing.join(" and ")
            )));
        }
        let min = expect.min_answers();
        if reply.answers.len() < usize::try_from(min).unwrap_or(usize::MAX) {
            let plural = if min == 1 { "" } else { "s" };
            return Err(failed(format!("at least {min} {of} answer{plural}")));
        }
        let message = &reply.message;
        expect
            .records
            .check(&message.answers, &message.authorities, &message.additionals)
            .map_err(|why| Failure::new(FailureReason::Assertion, why))
    }
}

/// "NOERROR: 10.0.0.5, 10.0.0.6", "NXDOMAIN with no answers", shortened when long.
fn describe(reply: &Reply) -> String {
    if reply.answers.is_empty() {
        return format!("{} with no answers", reply.rcode);
    }
    let mut text = format!("{}: ", reply.rcode);
    for (i, answer) in reply.answers.iter().take(SHOWN_ANSWERS).enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        if answer.chars().count() > SHOWN_CHARS {
            let cut: String = answer.chars().take(SHOWN_CHARS).collect();
            let _ = write!(text, "{cut}...");
        } else {
            text.push_str(answer);
        }
    }
    if reply.answers.len() > SHOWN_ANSWERS {
        let _ = write!(text, " and {} more", reply.answers.len() - SHOWN_ANSWERS);
    }
    text
}

/// An answer's text form, as the module's docs list them.
fn answer_text(data: &RData) -> String {
    match data {
        RData::A(a) => a.0.to_string(),
        RData::AAAA(aaaa) => aaaa.0.to_string(),
        RData::CNAME(name) => name_text(&name.0),
        RData::NS(name) => name_text(&name.0),
        RData::PTR(name) => name_text(&name.0),
        RData::MX(mx) => format!("{} {}", mx.preference, name_text(&mx.exchange)),
        RData::TXT(txt) => txt
            .txt_data
            .iter()
            .map(|part| String::from_utf8_lossy(part))
            .collect(),
        RData::SRV(srv) => format!(
            "{} {} {} {}",
            srv.priority,
            srv.weight,
            srv.port,
            name_text(&srv.target)
        ),
        RData::SOA(soa) => format!(
            "{} {} {} {} {} {} {}",
            name_text(&soa.mname),
            name_text(&soa.rname),
            soa.serial,
            soa.refresh,
            soa.retry,
            soa.expire,
            soa.minimum
        ),
        other => other.to_string(),
    }
}

/// A name without its trailing dot (the root stays `.`).
fn name_text(name: &Name) -> String {
    let text = name.to_ascii();
    match text.strip_suffix('.') {
        Some(stripped) if !stripped.is_empty() => stripped.to_owned(),
        _ => text,
    }
}

/// Whether `bytes` are the reply to `query`: a response with its id, opcode and question.
fn matching_reply(bytes: &[u8], query: &Message) -> Option<Message> {
    let reply = Message::from_vec(bytes).ok()?;
    let meta = &reply.metadata;
    let same_question = reply.queries == query.queries
        || (reply.queries.is_empty() && meta.response_code != ResponseCode::NoError);
    (meta.message_type == MessageType::Response
        && meta.id == query.metadata.id
        && meta.op_code == query.metadata.op_code
        && same_question)
        .then_some(reply)
}

/// What to add to a timeout's detail about replies that were not the query's.
fn ignored_note(ignored: usize) -> String {
    match ignored {
        0 => String::new(),
        1 => "; ignored 1 reply that did not match the query".to_owned(),
        n => format!("; ignored {n} replies that did not match the query"),
    }
}

async fn udp_exchange(
    server: SocketAddr,
    wire: &[u8],
    query: &Message,
    deadline: Instant,
    ready: &mut Instant,
) -> Result<Message, Failure> {
    let local = if server.is_ipv4() {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    };
    let socket = UdpSocket::bind(local)
        .await
        .map_err(|e| Failure::io("bind a UDP socket", &e))?;
    // Connected: only the server's datagrams arrive, and an ICMP port unreachable comes back
    // as ECONNREFUSED on the next send or receive.
    socket
        .connect(server)
        .await
        .map_err(|e| Failure::io(&format!("connect to {server}"), &e))?;
    let started = Instant::now();
    *ready = started;
    let span = deadline.saturating_duration_since(started);
    // On the heap: a buffer held across awaits would bloat every probe's future by its size.
    let mut buf = vec![0; MAX_DATAGRAM];
    let (mut sent, mut ignored) = (0, 0);
    loop {
        if sent < UDP_SENDS && Instant::now() >= started + span * sent / UDP_SENDS {
            match timeout_at(deadline, socket.send(wire)).await {
                Err(_) => break,
                Ok(Err(e)) => return Err(Failure::io(&format!("send to {server}"), &e)),
                Ok(Ok(_)) => sent += 1,
            }
        }
        let wake = if sent < UDP_SENDS {
            started + span * sent / UDP_SENDS
        } else {
            deadline
        };
        match timeout_at(wake, socket.recv(&mut buf)).await {
            Err(_) if wake >= deadline => break,
            Err(_) => {}
            Ok(Err(e)) => return Err(Failure::io(&format!("receive from {server}"), &e)),
            Ok(Ok(n)) => match matching_reply(&buf[..n], query) {
                Some(reply) => return Ok(reply),
                None => ignored += 1,
            },
        }
    }
    Err(Failure::new(
        FailureReason::Timeout,
        format_args!(
            "no reply from {server} over UDP in time (asked {sent} times){}",
            ignored_note(ignored)
        ),
    ))
}

async fn tcp_exchange(
    server: SocketAddr,
    wire: &[u8],
    query: &Message,
    deadline: Instant,
    ready: &mut Instant,
) -> Result<Message, Failure> {
    let len = u16::try_from(wire.len())
        .map_err(|_| Failure::new(FailureReason::Io, "the query is too long for TCP"))?;
    let mut stream = connect(server, CloseMode::Reset, true, deadline).await?;
    *ready = Instant::now();
    let mut framed = Vec::with_capacity(2 + wire.len());
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(wire);
    match timeout_at(deadline, stream.write_all(&framed)).await {
        Err(_) => {
            return Err(Failure::new(
                FailureReason::Timeout,
                format_args!("sending the query to {server} over TCP timed out"),
            ));
        }
        Ok(Err(e)) => return Err(Failure::io(&format!("send to {server}"), &e)),
        Ok(Ok(())) => {}
    }
    let mut ignored = 0;
    loop {
        match read_message(&mut stream, server, deadline).await {
            Ok(bytes) => match matching_reply(&bytes, query) {
                Some(reply) => return Ok(reply),
                None => ignored += 1,
            },
            Err(Some(failure)) => return Err(failure),
            Err(None) => {
                return Err(Failure::new(
                    FailureReason::Timeout,
                    format_args!(
                        "no reply from {server} over TCP in time{}",
                        ignored_note(ignored)
                    ),
                ));
            }
        }
    }
}

/// One length-prefixed message; `Err(None)` when the deadline passed first.
async fn read_message(
    stream: &mut TcpStream,
    server: SocketAddr,
    deadline: Instant,
) -> Result<Vec<u8>, Option<Failure>> {
    let mut len = [0; 2];
    read_exact(stream, &mut len, server, deadline).await?;
    let mut bytes = vec![0; usize::from(u16::from_be_bytes(len))];
    read_exact(stream, &mut bytes, server, deadline).await?;
    Ok(bytes)
}

async fn read_exact(
    stream: &mut TcpStream,
    buf: &mut [u8],
    server: SocketAddr,
    deadline: Instant,
) -> Result<(), Option<Failure>> {
    match timeout_at(deadline, stream.read_exact(buf)).await {
        Err(_) => Err(None),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Some(Failure::new(
            FailureReason::Io,
            format_args!("{server} closed the TCP connection before replying"),
        ))),
        Ok(Err(e)) => Err(Some(Failure::io(&format!("receive from {server}"), &e))),
    }
}

#[async_trait::async_trait]
impl Probe for DnsProbe {
    async fn check(&self, timeout: Duration) -> CheckResult {
        self.observe(timeout).await.0
    }

    async fn observe(&self, timeout: Duration) -> (CheckResult, Observed) {
        let mut observed = Observed::default();
        let result = match self.run(timeout, &mut observed).await {
            Ok(verdict) => CheckResult::of(verdict),
            Err(failure) => CheckResult::failed(failure),
        };
        (result, observed)
    }
}

#[cfg(test)]
mod tests {
    use hickory_resolver::proto::rr::rdata::{MX, SOA, SRV, TXT};

    use super::*;

    fn name(text: &str) -> Name {
        Name::from_ascii(text).unwrap()
    }

    #[test]
    fn answers_have_their_documented_text() {
        assert_eq!(
            answer_text(&RData::MX(MX::new(10, name("mail.test.")))),
            "10 mail.test"
        );
        assert_eq!(
            answer_text(&RData::TXT(TXT::new(vec!["v=1; ".into(), "ok".into()]))),
            "v=1; ok"
        );
        assert_eq!(
            answer_text(&RData::SRV(SRV::new(1, 5, 8080, name("srv.test.")))),
            "1 5 8080 srv.test"
        );
        let soa = SOA::new(
            name("ns.test."),
            name("admin.test."),
            7,
            3600,
            600,
            86400,
            60,
        );
        assert_eq!(
            answer_text(&RData::SOA(soa)),
            "ns.test admin.test 7 3600 600 86400 60"
        );
        assert_eq!(name_text(&Name::root()), ".");
    }

    #[test]
    fn long_answers_are_shortened_in_the_detail() {
        let reply = Reply {
            rcode: Rcode::NOERROR,
            answers: (0..10).map(|i| format!("10.0.0.{i}")).collect(),
            message: Message::query(),
        };
        assert_eq!(
            describe(&reply),
            "NOERROR: 10.0.0.0, 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, 10.0.0.6, \
             10.0.0.7 and 2 more"
        );
        let long = Reply {
            rcode: Rcode::NOERROR,
            answers: vec!["x".repeat(100)],
            message: Message::query(),
        };
        assert_eq!(describe(&long), format!("NOERROR: {}...", "x".repeat(80)));
    }
}

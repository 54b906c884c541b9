//! A TCP conversation and an HTTP probe's reply patterns against real servers on loopback: the
//! steps in order over a line protocol (a reply made of what the peer said among them), and the body, header, TLS and version conditions over a
//! reply as it comes from a socket.

use std::net::SocketAddr;
use std::time::Duration;

use probe::outcome::{CheckResult, FailureReason, Verdict};
use probe::tier::Probe;
use probe::tier::http::{HeaderPattern, HttpProbe, HttpSpec, header::HeaderName};
use probe::tier::resolve::Names;
use probe::tier::tcp::{Step, TcpProbe, TcpSpec};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const TIMEOUT: Duration = Duration::from_secs(2);

fn names() -> Names {
    Names::system()
}

/// Greets with two lines, then answers `PING` with `+PONG` and anything else with `-ERR`.
async fn line_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let _ = write.write_all(b"* hello\r\n+OK ready\r\n").await;
                let mut reader = BufReader::new(read);
                let mut line = String::new();
                while reader.read_line(&mut line).await.is_ok_and(|n| n > 0) {
                    let answer = match line.trim_end() {
                        "PING" => "+PONG\r\nPING :cookie-42\r\n".to_owned(),
                        pong if pong.starts_with("PONG ") => format!("+{pong}\r\n"),
                        _ => "-ERR\r\n".to_owned(),
                    };
                    let _ = write.write_all(answer.as_bytes()).await;
                    line.clear();
                }
            });
        }
    });
    addr
}

fn conversation(addr: SocketAddr, send: &str, expect: &str) -> TcpProbe {
    let re = |s: &str| regex::bytes::Regex::new(s).unwrap();
    let spec = TcpSpec::connect(probe::Address::Socket(addr)).with_conversation(vec![
        Step::ExpectLine(re("^\\+OK")),
        Step::Send(send.as_bytes().to_vec()),
        Step::ExpectLine(re(expect)),
    ]);
    TcpProbe::new(spec, names())
}

#[tokio::test]
async fn a_reply_fills_in_what_the_peer_said() {
    let addr = line_server().await;
    let re = |s: &str| regex::bytes::Regex::new(s).unwrap();
    let spec = TcpSpec::connect(probe::Address::Socket(addr)).with_conversation(vec![
        Step::ExpectLine(re("^\\+OK")),
        Step::Send(b"PING\n".to_vec()),
        Step::ExpectLine(re("^PING :(?<cookie>.+)$")),
        Step::Reply(b"PONG ${cookie}\n".to_vec()),
        Step::ExpectLine(re("^\\+PONG cookie-42$")),
    ]);
    let result = TcpProbe::new(spec, names()).check(TIMEOUT).await;
    assert_eq!(result.verdict, Verdict::Up, "{result:?}");
}

#[tokio::test]
async fn a_conversation_runs_its_steps_line_by_line() {
    let addr = line_server().await;
    let result = conversation(addr, "PING\n", "^\\+PONG$")
        .check(TIMEOUT)
        .await;
    assert_eq!(result.verdict, Verdict::Up, "{result:?}");

    let result = conversation(addr, "HELLO\n", "^\\+PONG$")
        .check(Duration::from_millis(300))
        .await;
    let failure = result.failure().expect("a wrong answer fails");
    assert_eq!(failure.reason, FailureReason::Timeout);
    assert_eq!(
        failure.detail,
        "step 3: no line matching /^\\+PONG$/ in time"
    );
}

/// One reply per connection, written as given (status line included).
async fn http_server(reply: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0; 4096];
                let mut read = 0;
                while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf[read..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                }
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

async fn http_check(addr: SocketAddr, patterns: impl FnOnce(&mut HttpSpec)) -> CheckResult {
    let mut spec = HttpSpec::get(format!("http://{addr}/").parse().unwrap());
    patterns(&mut spec);
    HttpProbe::new(spec, names()).check(TIMEOUT).await
}

#[tokio::test]
async fn reply_patterns_judge_the_reply_as_it_came() {
    let addr = http_server(
        "HTTP/1.0 200 OK\r\nX-Mode: readonly\r\nContent-Length: 13\r\nConnection: close\r\n\r\nstatus: fine\n",
    )
    .await;
    let re = |s: &str| regex::bytes::Regex::new(s).unwrap();
    let header = |re: &str| HeaderPattern {
        name: HeaderName::from_static("x-mode"),
        regex: regex::Regex::new(re).unwrap(),
        allow_missing: false,
    };
    let passing = http_check(addr, |spec| {
        spec.patterns.body_matches = vec![re("(?m)^status: fine$")];
        spec.patterns.body_not_matches = vec![re("error")];
        spec.patterns.header_matches = vec![header("^read")];
        spec.patterns.tls = Some(false);
        spec.patterns.versions = vec!["HTTP/1.0".parse().unwrap()];
    })
    .await;
    assert_eq!(passing.verdict, Verdict::Up, "{passing:?}");

    /// A change to the passing spec, and the failure it must bring.
    type Case = (fn(&mut HttpSpec), FailureReason, &'static str);
    let cases: [Case; 4] = [
        (
            |spec| spec.patterns.body_not_matches = vec![regex::bytes::Regex::new("fine").unwrap()],
            FailureReason::Body,
            "body matches /fine/",
        ),
        (
            |spec| {
                spec.patterns.header_not_matches = vec![HeaderPattern {
                    name: HeaderName::from_static("x-mode"),
                    regex: regex::Regex::new("only$").unwrap(),
                    allow_missing: false,
                }];
            },
            FailureReason::Assertion,
            "header x-mode matches /only$/",
        ),
        (
            |spec| spec.patterns.tls = Some(true),
            FailureReason::Assertion,
            "the reply did not come over TLS",
        ),
        (
            |spec| spec.patterns.versions = vec!["HTTP/1.1".parse().unwrap()],
            FailureReason::Assertion,
            "the reply came in HTTP/1.0, expected HTTP/1.1",
        ),
    ];
    for (set, reason, detail) in cases {
        let result = http_check(addr, set).await;
        let failure = result
            .failure()
            .unwrap_or_else(|| panic!("passed: {detail}"));
        assert_eq!((failure.reason, failure.detail.as_str()), (reason, detail));
    }
}

//! The YAML configuration loader: valid documents, and the exact location and wording of every
//! error in invalid ones.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use std::num::NonZeroU32;
use std::time::SystemTime;

use probe::Address;
use probe::health::{FlapPolicy, MaintenanceWindow, Schedule, Thresholds, WindowStart};
use probe::outcome::Severity;
use probe::tier::ProbeSpec;
use probe::tier::dns::{AnswerMatch, DnsSpec, DnsTransport, DnsType, Rcode};
use probe::tier::http::{
    Comparison, HeaderMatch, HttpSpec, JsonMatch, JsonScalar, JsonTest, Method, StatusPattern,
    StatusSet, TlsTrust,
};
use probe::tier::icmp::{IcmpDegradedIf, IcmpHost, IcmpSpec};
use probe::tier::reply::ReplyExpect;
use probe::tier::tcp::{CloseMode, TcpExpect, TcpSpec};
use probe::tier::udp::UdpSpec;
use probe_config::{self as config, Config, ConfigError, ConfigErrors};

/// Joins lines, so that a case's line numbers are the indices (plus one) of its lines.
fn doc(lines: &[&str]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    config::parse(Path::new("t.yaml"), text)
}

fn parse_ok(text: &str) -> Config {
    match parse(text) {
        Ok(config) => config,
        Err(errors) => panic!("expected a valid document, got:\n{errors}\n--- document:\n{text}"),
    }
}

fn tcp(config: &Config, index: usize) -> &TcpSpec {
    match &config.topology.targets[index].probe {
        ProbeSpec::Tcp(tcp) => tcp,
        other => panic!("expected a tcp probe, got {other:?}"),
    }
}

fn http(config: &Config, index: usize) -> &HttpSpec {
    match &config.topology.targets[index].probe {
        ProbeSpec::Http(http) => http,
        other => panic!("expected an http probe, got {other:?}"),
    }
}

/// An invalid document and the errors it must produce, in order: line, column, and the message
/// (the full message, or a precise substring of it where the rest comes from another crate).
struct Case {
    name: &'static str,
    yaml: &'static [&'static str],
    errors: &'static [(u64, u64, &'static str)],
}

const CASES: &[Case] = &[
    Case {
        name: "unknown key with a suggestion",
        yaml: &[
            "targets:",
            "  - id: db",
            "    intervall: 5s",
            "    tcp: {address: \"db:5432\"}",
        ],
        errors: &[(
            3,
            5,
            r#"unknown field "intervall" in target, did you mean "interval"?"#,
        )],
    },
    Case {
        name: "unknown key without a close match lists the allowed keys",
        yaml: &[
            "targets:",
            "  - id: db",
            "    colour: red",
            "    tcp: {address: \"db:1\"}",
        ],
        errors: &[(
            3,
            5,
            r#"unknown field "colour" in target; expected one of "id", "kind", "tcp", "http", "grpc", "tls", "dns", "icmp", "udp", "alert", "state", "maintenance", "depends_on", "interval", "timeout", "rise", "fall", "jitter", "fast_interval", "backoff", "degrade_after", "recover_after", "flap", "dns_stale_for", "circuit_breaker", "skip_active_after", "outlier", "recovery", "slow_start""#,
        )],
    },
    Case {
        name: "one typo in each of two targets gives two errors",
        yaml: &[
            "targets:",
            "  - id: a",
            "    timout: 1s",
            "    tcp: {address: \"a:1\"}",
            "  - id: b",
            "    tcp:",
            "      adress: \"b:1\"",
        ],
        // No extra `missing field "address"`: it is implied by the typo.
        errors: &[
            (
                3,
                5,
                r#"unknown field "timout" in target, did you mean "timeout"?"#,
            ),
            (
                7,
                7,
                r#"unknown field "adress" in tcp, did you mean "address"?"#,
            ),
        ],
    },
    Case {
        name: "several structural errors in one target are all reported",
        yaml: &[
            "targets:",
            "  - id: a",
            "    intervall: 5s",
            "    tcp: {address: \"a:1\"}",
            "    rise: many",
            "    fal: 2",
            "    timeout: [1s]",
        ],
        errors: &[
            (
                3,
                5,
                r#"unknown field "intervall" in target, did you mean "interval"?"#,
            ),
            (
                5,
                11,
                r#"invalid type for "rise": expected an integer between 0 and 4294967295, found string "many""#,
            ),
            (
                6,
                5,
                r#"unknown field "fal" in target, did you mean "fall"?"#,
            ),
            (
                7,
                14,
                r#"invalid type for "timeout": expected a string, found a sequence"#,
            ),
        ],
    },
    Case {
        name: "unknown key in defaults and in backoff",
        yaml: &[
            "defaults:",
            "  intrval: 5s",
            "  backoff: {max: 20s, jiter: 0.5}",
            "targets: []",
        ],
        errors: &[
            (
                2,
                3,
                r#"unknown field "intrval" in defaults, did you mean "interval"?"#,
            ),
            (
                3,
                23,
                r#"unknown field "jiter" in backoff, did you mean "jitter"?"#,
            ),
        ],
    },
    Case {
        name: "unknown top-level key",
        yaml: &["target:", "  - id: a"],
        errors: &[(
            1,
            1,
            r#"unknown field "target" in document, did you mean "targets"?"#,
        )],
    },
    Case {
        name: "invalid duration",
        yaml: &[
            "targets:",
            "  - id: a",
            "    interval: 5 sekunden",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[(
            3,
            15,
            r#"invalid duration "5 sekunden" for "interval": unknown time unit "sekunden""#,
        )],
    },
    Case {
        name: "duration without a unit",
        yaml: &["defaults:", "  timeout: 5", "targets: []"],
        errors: &[(
            2,
            12,
            r#"invalid duration "5" for "timeout": time unit needed, for example 5sec or 5ms"#,
        )],
    },
    Case {
        name: "zero and overlong durations",
        yaml: &[
            "targets:",
            "  - id: a",
            "    interval: 0s",
            "    tcp: {address: \"a:1\"}",
            "  - id: b",
            "    backoff: {max: 2days}",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[
            (3, 15, "interval must be greater than zero"),
            (6, 20, r#"backoff.max must be at most 1day, got "2days""#),
        ],
    },
    Case {
        name: "duplicate id in one file",
        yaml: &[
            "targets:",
            "  - id: db",
            "    tcp: {address: \"a:1\"}",
            "  - id: db",
            "    tcp: {address: \"a:2\"}",
        ],
        errors: &[(
            4,
            9,
            r#"duplicate target id "db" (first defined at t.yaml:2:9)"#,
        )],
    },
    Case {
        name: "target without a probe",
        yaml: &["targets:", "  - id: db", "    interval: 5s"],
        errors: &[(
            2,
            5,
            r#"target "db" has no probe: add one of "tcp", "http", "grpc", "tls", "dns", "icmp", "udp""#,
        )],
    },
    Case {
        name: "missing id and missing address",
        yaml: &[
            "targets:",
            "  - interval: 5s",
            "    tcp:",
            "      send: \"x\"",
        ],
        errors: &[
            (2, 5, r#"missing field "id" in target"#),
            (4, 7, r#"missing field "address" in tcp"#),
        ],
    },
    Case {
        name: "timeout not below interval, on the target",
        yaml: &[
            "targets:",
            "  - id: db",
            "    interval: 1s",
            "    timeout: 1s",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[(4, 5, "timeout (1s) must be less than interval (1s)")],
    },
    Case {
        name: "timeout from defaults is blamed on defaults, once per distinct problem",
        yaml: &[
            "defaults:",
            "  timeout: 2s",
            "targets:",
            "  - id: a",
            "    interval: 2s",
            "    tcp: {address: \"a:1\"}",
            "  - id: b",
            "    interval: 1s",
            "    tcp: {address: \"a:1\"}",
            "  - id: c",
            "    interval: 1s",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[
            (2, 3, "timeout (2s) must be less than interval (2s)"),
            (2, 3, "timeout (2s) must be less than interval (1s)"),
        ],
    },
    Case {
        name: "bad id characters",
        yaml: &[
            "targets:",
            "  - id: Orders_DB",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[(
            2,
            9,
            r#"target id "Orders_DB" has character 'O'; allowed are a-z, 0-9, '.', '_' and '-'"#,
        )],
    },
    Case {
        name: "bad addresses",
        yaml: &[
            "targets:",
            "  - id: a",
            "    tcp: {address: localhost}",
            "  - id: b",
            "    tcp: {address: \"db:0\"}",
            "  - id: c",
            "    tcp: {address: \"d b:80\"}",
        ],
        errors: &[
            (
                3,
                20,
                r#"address "localhost" has no port; expected HOST:PORT or [IPV6]:PORT"#,
            ),
            (
                5,
                20,
                r#"address "db:0" has an invalid port; expected 1-65535"#,
            ),
            (7, 20, r#"address "d b:80" has an invalid host"#),
        ],
    },
    Case {
        name: "rise and fall of zero, negative fall",
        yaml: &[
            "targets:",
            "  - id: a",
            "    rise: 0",
            "    fall: 0",
            "    tcp: {address: \"a:1\"}",
            "  - id: b",
            "    fall: -1",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[
            (3, 11, "rise must be at least 1"),
            (4, 11, "fall must be at least 1"),
            (
                7,
                11,
                r#"invalid value for "fall": expected an integer between 0 and 4294967295, found integer -1"#,
            ),
        ],
    },
    Case {
        name: "jitters out of range",
        yaml: &[
            "defaults:",
            "  jitter: 1.5",
            "  backoff: {jitter: -0.1}",
            "targets: []",
        ],
        errors: &[
            (2, 11, "jitter 1.5 is outside 0..=1"),
            (3, 21, "backoff jitter -0.1 is outside 0..=1"),
        ],
    },
    Case {
        name: "backoff max and fast interval against the interval",
        yaml: &[
            "targets:",
            "  - id: a",
            "    interval: 10s",
            "    backoff: {max: 5s}",
            "    tcp: {address: \"a:1\"}",
            "  - id: b",
            "    fast_interval: 10s",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[
            (4, 15, "backoff max (5s) must be at least interval (10s)"),
            (
                7,
                5,
                "fast_interval (10s) must be between 1ms and interval (5s)",
            ),
        ],
    },
    Case {
        name: "invalid regex",
        yaml: &[
            "targets:",
            "  - id: a",
            "    tcp:",
            "      address: \"a:1\"",
            "      expect_regex: \"^(PONG\"",
        ],
        errors: &[(
            5,
            21,
            r#"invalid regex "^(PONG" for "expect_regex": unclosed group"#,
        )],
    },
    Case {
        name: "expect and expect_regex together",
        yaml: &[
            "targets:",
            "  - id: a",
            "    tcp:",
            "      address: \"a:1\"",
            "      expect: PONG",
            "      expect_regex: PONG",
        ],
        errors: &[(
            6,
            7,
            r#""expect" and "expect_regex" are mutually exclusive: keep only one"#,
        )],
    },
    Case {
        name: "unknown close modes",
        yaml: &[
            "targets:",
            "  - id: a",
            "    tcp: {address: \"a:1\", close: linger}",
            "  - id: b",
            "    tcp: {address: \"a:1\", close: gracefull}",
        ],
        errors: &[
            (
                3,
                34,
                r#"unknown close mode "linger" for "close"; expected "reset" or "graceful""#,
            ),
            (
                5,
                34,
                r#"unknown close mode "gracefull" for "close", did you mean "graceful"?"#,
            ),
        ],
    },
    Case {
        name: "wrong types",
        yaml: &[
            "targets:",
            "  - just-a-string",
            "  - id: a",
            "    tcp: \"a:1\"",
            "  - id: b",
            "    tcp: {address: [1]}",
            "    jitter: lots",
        ],
        errors: &[
            (
                2,
                5,
                r#"invalid type for target: expected a mapping, found string "just-a-string""#,
            ),
            (
                4,
                10,
                r#"invalid type for "tcp": expected a mapping, found string "a:1""#,
            ),
            (
                6,
                20,
                r#"invalid type for "tcp.address": expected a string, found a sequence"#,
            ),
            (
                7,
                13,
                r#"invalid type for "jitter": expected a number, found string "lots""#,
            ),
        ],
    },
    Case {
        name: "targets is not a sequence",
        yaml: &["targets: {id: a}"],
        errors: &[(
            1,
            10,
            r#"invalid type for "targets": expected a sequence, found a mapping"#,
        )],
    },
    Case {
        name: "document is not a mapping",
        yaml: &["- id: a"],
        errors: &[(
            1,
            1,
            "invalid type for document: expected a mapping, found a sequence",
        )],
    },
    Case {
        name: "duplicate key in a target",
        yaml: &[
            "targets:",
            "  - id: a",
            "    interval: 5s",
            "    tcp: {address: \"a:1\"}",
            "    interval: 6s",
        ],
        errors: &[(5, 5, r#"duplicate field "interval" in target"#)],
    },
    Case {
        name: "YAML syntax error",
        yaml: &["targets:", "  - id: a", "    tcp: {address: \"a:1\""],
        errors: &[(3, 10, "invalid YAML: ")],
    },
    Case {
        name: "tab indentation",
        yaml: &["targets:", "\t- id: a"],
        errors: &[(2, 2, "invalid YAML: tabs disallowed")],
    },
    Case {
        name: "several documents in one file",
        yaml: &["targets: []", "---", "targets: []"],
        errors: &[(3, 1, "invalid YAML: ")],
    },
    Case {
        name: "http: invalid URLs, without echoing credentials",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http: {url: \"ftp://x/ready\"}",
            "  - id: b",
            "    http: {url: \"http://user:hunter2@x/\"}",
            "  - id: c",
            "    http: {url: /ready}",
        ],
        errors: &[
            (
                3,
                17,
                r#"URL scheme "ftp" is not supported; expected http or https"#,
            ),
            (
                5,
                17,
                "URL has credentials; send them in an Authorization header instead",
            ),
            (7, 17, "invalid URL: relative URL without a base"),
        ],
    },
    Case {
        name: "http: unknown keys and methods",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      method: GTE",
            "      follow_redirect: true",
            "      expect: {statuss: 200}",
            "  - id: b",
            "    http: {url: \"http://127.0.0.1:1/\", method: FETCH}",
        ],
        errors: &[
            (
                5,
                15,
                r#"unknown method "GTE" for "method", did you mean "GET"?"#,
            ),
            (
                6,
                7,
                r#"unknown field "follow_redirect" in http, did you mean "follow_redirects"?"#,
            ),
            (
                7,
                16,
                r#"unknown field "statuss" in expect, did you mean "status"?"#,
            ),
            (
                9,
                48,
                r#"unknown method "FETCH" for "method"; expected one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"#,
            ),
        ],
    },
    Case {
        name: "http: status patterns",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      expect: {status: [200, \"6xx\", 2000]}",
            "  - id: b",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      expect: {status: []}",
        ],
        errors: &[
            (
                5,
                30,
                r#"invalid status "6xx": expected a code from 100 to 599, a class from "1xx" to "5xx" or a range such as "401-499""#,
            ),
            (5, 37, r#"invalid status "2000""#),
            (
                9,
                24,
                "status list is empty: give at least one code or class",
            ),
        ],
    },
    Case {
        name: "http: JSON paths and values",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      expect:",
            "        json: {\"$.a..b\": 1, status: UP, \"$.ok\": [1]}",
            "      degraded_if:",
            "        json: {\"$[*]\": 1}",
        ],
        errors: &[
            (
                6,
                16,
                r#"invalid JSON path "$.a..b": empty field name at offset 3 of JSON path"#,
            ),
            (
                6,
                29,
                r#"invalid JSON path "status": JSON path must start with "$""#,
            ),
            (
                6,
                49,
                r#"invalid type for "http.expect.json.$.ok": expected a string, number, boolean, null or a mapping of tests, found a sequence"#,
            ),
            (
                8,
                16,
                r#"invalid JSON path "$[*]": invalid array index "*""#,
            ),
        ],
    },
    Case {
        name: "http: headers, environment variables and conditions on headers",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      headers:",
            "        Authorization: \"Bearer ${PROBE_ENGINE_TEST_SURELY_UNSET}\"",
            "        \"bad name\": x",
            "        Content-Length: 5",
            "        X-Bad: \"${1X}\"",
            "      expect:",
            "        header: {\"bad name\": x}",
        ],
        errors: &[
            (
                6,
                24,
                r#"in header "Authorization": environment variable PROBE_ENGINE_TEST_SURELY_UNSET is not set"#,
            ),
            (7, 9, r#"invalid header name "bad name""#),
            (
                8,
                9,
                r#"header "content-length" is managed by the probe and cannot be set"#,
            ),
            (
                9,
                16,
                r#"in header "X-Bad": invalid variable name "1X" in "${...}""#,
            ),
            (11, 18, r#"invalid header name "bad name""#),
        ],
    },
    Case {
        name: "http: TLS settings",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http:",
            "      url: https://127.0.0.1:1/",
            "      tls: {insecure_skip_verify: true, ca_file: ca.pem}",
            "  - id: b",
            "    http:",
            "      url: https://127.0.0.1:1/",
            "      tls: {ca_file: /nonexistent/ca.pem, insecure: true}",
        ],
        errors: &[
            (
                5,
                41,
                r#""insecure_skip_verify" and "ca_file" are mutually exclusive: keep only one"#,
            ),
            (
                9,
                22,
                "cannot read CA file /nonexistent/ca.pem: No such file or directory",
            ),
            (
                9,
                43,
                r#"unknown field "insecure" in tls; expected one of "insecure_skip_verify", "ca_file""#,
            ),
        ],
    },
    Case {
        name: "http: booleans, latency and a second probe kind",
        yaml: &[
            "targets:",
            "  - id: a",
            "    tcp: {address: \"a:1\"}",
            "    http: {url: \"http://127.0.0.1:1/\"}",
            "  - id: b",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      fresh_connection: yes",
            "      degraded_if: {latency_over: fast}",
        ],
        errors: &[
            (4, 5, r#"target "a" has more than one probe: keep only one"#),
            (
                8,
                25,
                r#"invalid type for "http.fresh_connection": expected a boolean, found string "yes""#,
            ),
            (9, 35, r#"invalid duration "fast" for "latency_over""#),
        ],
    },
    Case {
        name: "http: signals",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      signals:",
            "        - {name: Shortage, severity: hgh, when: {status: 503}}",
            "        - {name: \"no spaces\", severity: low, when: {status: 503}}",
            "        - {name: Always, severity: info, when: {}}",
            "        - {name: Shortage, severity: fatal, when: {status: 5xx}}",
            "        - {name: Late, severity: low}",
            "        - {name: Odd, severity: low, when: {body_contains: x}}",
        ],
        errors: &[
            (
                6,
                38,
                r#"unknown severity "hgh" for "severity", did you mean "high"?"#,
            ),
            (
                7,
                18,
                r#"signal name "no spaces" is invalid: use 1 to 128 of A-Z, a-z, 0-9, '_', '.', ':' and '-'"#,
            ),
            (
                8,
                48,
                r#"signal "Always" has no condition: give at least one of status, header, json"#,
            ),
            (
                9,
                38,
                r#"unknown severity "fatal" for "severity"; expected one of info, low, medium, high, critical"#,
            ),
            (10, 11, r#"missing field "when" in signal"#),
            (
                11,
                45,
                r#"unknown field "body_contains" in when; expected one of "status", "header", "json""#,
            ),
        ],
    },
    Case {
        name: "http: duplicate signal names",
        yaml: &[
            "targets:",
            "  - id: a",
            "    http:",
            "      url: http://127.0.0.1:1/",
            "      signals:",
            "        - {name: Shortage, severity: high, when: {status: 503}}",
            "        - {name: Shortage, severity: low, when: {status: 500}}",
        ],
        errors: &[(7, 18, r#"duplicate signal name "Shortage""#)],
    },
    Case {
        name: "degrade_after, recover_after and flap",
        yaml: &[
            "defaults:",
            "  degrade_after: 0",
            "  flap: yes",
            "targets:",
            "  - id: a",
            "    recover_after: -1",
            "    flap: {transitions: 0, window: 0s, min_stabel: 1m}",
            "    tcp: {address: \"a:1\"}",
            "  - id: b",
            "    flap: {window: 2days}",
            "    tcp: {address: \"a:1\"}",
        ],
        errors: &[
            (2, 18, "degrade_after must be at least 1"),
            (
                3,
                9,
                r#"invalid type for "flap": expected a mapping, found string "yes""#,
            ),
            (
                6,
                20,
                r#"invalid value for "recover_after": expected an integer between 0 and 4294967295, found integer -1"#,
            ),
            (7, 25, "flap.transitions must be at least 1"),
            (7, 36, "flap.window must be greater than zero"),
            (
                7,
                40,
                r#"unknown field "min_stabel" in flap, did you mean "min_stable"?"#,
            ),
            (10, 20, r#"flap.window must be at most 1day, got "2days""#),
        ],
    },
    Case {
        name: "maintenance windows",
        yaml: &[
            "targets:",
            "  - id: a",
            "    tcp: {address: \"a:1\"}",
            "    maintenance:",
            "      - {start: \"2026-13-01T00:00:00Z\", duration: 1h}",
            "      - {daily: \"24:00\", duration: 30m}",
            "      - {daily: \"02:00\", duration: 25h}",
            "      - {start: \"2026-12-01T02:00:00Z\", daily: \"02:00\", duration: 1h}",
            "      - {duration: 1h}",
            "      - {daily: \"02:00\"}",
            "      - {start: \"2026-12-01T02:00:00+02:00\", duration: 0s}",
            "      - {daily: \"2:00\", duration: 1h, every: day}",
        ],
        errors: &[
            (
                5,
                17,
                r#"invalid time "2026-13-01T00:00:00Z" for "start": numeric component is out of range; expected an RFC 3339 UTC time such as 2026-12-01T02:00:00Z"#,
            ),
            (
                6,
                17,
                r#"invalid time of day "24:00" for "daily"; expected HH:MM or HH:MM:SS (UTC), from 00:00 to 23:59:59"#,
            ),
            (7, 36, "a daily maintenance window lasts at most 24h"),
            (
                8,
                41,
                r#""start" and "daily" are mutually exclusive: keep only one"#,
            ),
            (
                9,
                9,
                r#"maintenance window needs "start" (a UTC time such as 2026-12-01T02:00:00Z) or "daily" (a UTC time of day such as "02:00")"#,
            ),
            (10, 9, r#"missing field "duration" in maintenance window"#),
            (
                11,
                17,
                r#"invalid time "2026-12-01T02:00:00+02:00" for "start": timestamp format is invalid"#,
            ),
            (11, 56, "duration must be greater than zero"),
            (
                12,
                39,
                r#"unknown field "every" in maintenance window; expected one of "start", "daily", "duration""#,
            ),
        ],
    },
    Case {
        name: "maintenance is per target, not a default",
        yaml: &["defaults:", "  maintenance: []", "targets: []"],
        errors: &[(2, 3, r#"unknown field "maintenance" in defaults"#)],
    },
    Case {
        name: "kitchen sink: every target and section reports its own errors",
        yaml: &[
            "defaults:",                                     // 1
            "  interval: soon",                              // 2
            "targets:",                                      // 3
            "  - id: ok",                                    // 4
            "    tcp: {address: \"a:1\"}",                   // 5
            "  - id: Bad",                                   // 6
            "    tcp: {address: \"a:1\", sned: x}",          // 7
            "  - id: c",                                     // 8
            "    rise: 0",                                   // 9
            "    tcp: {address: nope, expect_regex: \"(\"}", // 10
            "  - id: ok",                                    // 11
            "    tcp: {address: \"a:1\"}",                   // 12
        ],
        errors: &[
            (
                2,
                13,
                r#"invalid duration "soon" for "interval": expected number at 0"#,
            ),
            (6, 9, r#"target id "Bad" has character 'B'"#),
            (
                7,
                27,
                r#"unknown field "sned" in tcp, did you mean "send"?"#,
            ),
            (9, 11, "rise must be at least 1"),
            (10, 20, r#"address "nope" has no port"#),
            (
                10,
                40,
                r#"invalid regex "(" for "expect_regex": unclosed group"#,
            ),
            (
                11,
                9,
                r#"duplicate target id "ok" (first defined at t.yaml:4:9)"#,
            ),
        ],
    },
    Case {
        name: "dependency errors point at the dependency",
        yaml: &[
            "targets:",                                    // 1
            "  - id: orders-db",                           // 2
            "    tcp: {address: \"a:1\"}",                 // 3
            "  - id: checkout",                            // 4
            "    kind: group",                             // 5
            "    depends_on:",                             // 6
            "      - {target: orders-bd, critical: true}", // 7
            "      - {target: checkout}",                  // 8
            "      - {target: orders-db, weight: 0}",      // 9
            "      - {target: orders-db, wieght: 2}",      // 10
            "      - {target: Bad}",                       // 11
            "  - id: empty",                               // 12
            "    kind: group",                             // 13
        ],
        errors: &[
            (
                7,
                9,
                r#"checkout depends on unknown node orders-bd (did you mean "orders-db"?)"#,
            ),
            (8, 9, "checkout depends on itself"),
            (
                9,
                9,
                "dependency checkout -> orders-db has weight 0; expected a number > 0",
            ),
            (
                10,
                29,
                r#"unknown field "wieght" in dependency, did you mean "weight"?"#,
            ),
            (11, 18, r#"target id "Bad" has character 'B'"#),
            (12, 9, "group empty has no dependencies"),
        ],
    },
    Case {
        name: "a cycle names its chain at the edge that closes it",
        yaml: &[
            "targets:",                                   // 1
            "  - id: a",                                  // 2
            "    kind: group",                            // 3
            "    depends_on: [{target: b}]",              // 4
            "  - id: b",                                  // 5
            "    tcp: {address: \"a:1\"}",                // 6
            "    depends_on: [{target: c}]",              // 7
            "  - id: c",                                  // 8
            "    kind: group",                            // 9
            "    depends_on:",                            // 10
            "      - {target: d}",                        // 11
            "      - {target: a, weight: 2}",             // 12
            "  - id: d",                                  // 13
            "    tcp: {address: \"a:1\"}",                // 14
            "  - id: e",                                  // 15
            "    kind: group",                            // 16
            "    depends_on: [{target: d}, {target: d}]", // 17
        ],
        errors: &[
            (12, 9, "dependency cycle a -> b -> c -> a"),
            (17, 31, "e depends on d again (first at t.yaml:17:18)"),
        ],
    },
    Case {
        name: "groups have no probe, schedule or maintenance, and kinds are checked",
        yaml: &[
            "targets:",                       // 1
            "  - id: svc",                    // 2
            "    kind: group",                // 3
            "    tcp: {address: \"a:1\"}",    // 4
            "    interval: 5s",               // 5
            "    depends_on: [{target: db}]", // 6
            "  - id: db",                     // 7
            "    kind: grup",                 // 8
            "    tcp: {address: \"a:1\"}",    // 9
        ],
        errors: &[
            (
                4,
                5,
                r#"target "svc" is a group: "tcp" does not apply (a group has no probe; it has id, kind, depends_on, state, alert, outlier, recovery, slow_start)"#,
            ),
            (
                5,
                5,
                r#"target "svc" is a group: "interval" does not apply"#,
            ),
            (
                8,
                11,
                r#"unknown kind "grup": the only kind is "group" (leave kind out for a probed target)"#,
            ),
        ],
    },
    Case {
        name: "scoring and readiness values are checked",
        yaml: &[
            "scoring: {window: 0, degraded_credit: 0.5, critical_cap: 2}", // 1
            "readiness:",                                                  // 2
            "  require: [chekout, db]",                                    // 3
            "  min_score: 0.8",                                            // 4
            "  hysteresis: -1",                                            // 5
            "targets:",                                                    // 6
            "  - id: checkout",                                            // 7
            "    kind: group",                                             // 8
            "    depends_on: [{target: db}]",                              // 9
            "  - id: db",                                                  // 10
            "    tcp: {address: \"a:1\"}",                                 // 11
        ],
        errors: &[
            (1, 19, "window 0 is outside 1..=1000"),
            (5, 15, "hysteresis -1 is outside 0..=1"),
        ],
    },
    Case {
        name: "readiness requires declared nodes",
        yaml: &[
            "readiness: {require: [chekout], min_score: 0.9, colour: red}", // 1
            "targets:",                                                     // 2
            "  - id: checkout",                                             // 3
            "    kind: group",                                              // 4
            "    depends_on: [{target: db}]",                               // 5
            "  - id: db",                                                   // 6
            "    tcp: {address: \"a:1\"}",                                  // 7
            "scoring: 3",                                                   // 8
        ],
        errors: &[
            (1, 49, r#"unknown field "colour" in readiness"#),
            (8, 10, "invalid type"),
        ],
    },
    Case {
        name: "readiness requiring an unknown node",
        yaml: &[
            "readiness: {require: [chekout, db]}", // 1
            "targets:",                            // 2
            "  - id: checkout",                    // 3
            "    kind: group",                     // 4
            "    depends_on: [{target: db}]",      // 5
            "  - id: db",                          // 6
            "    tcp: {address: \"a:1\"}",         // 7
        ],
        errors: &[(
            1,
            23,
            r#"readiness requires "chekout", which is neither a target nor a group (did you mean "checkout"?)"#,
        )],
    },
    Case {
        name: "dns: unknown record types",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns: {server: 127.0.0.1, name: a.test, type: AAA}",
            "  - id: b",
            "    dns: {server: 127.0.0.1, name: a.test, type: AXFR}",
        ],
        errors: &[
            (
                3,
                50,
                r#"unknown record type "AAA" for "type", did you mean "AAAA"?"#,
            ),
            (
                5,
                50,
                r#"unknown record type "AXFR" for "type"; expected one of A, AAAA, CNAME, MX, TXT, SRV, NS, SOA, PTR"#,
            ),
        ],
    },
    Case {
        name: "dns: unknown transport",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns:",
            "      server: 127.0.0.1",
            "      name: a.test",
            "      transport: tpc",
        ],
        errors: &[(
            6,
            18,
            r#"unknown transport "tpc" for "transport", did you mean "tcp"?"#,
        )],
    },
    Case {
        name: "dns: unknown rcode",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns:",
            "      server: 127.0.0.1",
            "      name: a.test",
            "      expect: {rcode: NXDOMIAN}",
        ],
        errors: &[(
            6,
            23,
            r#"unknown rcode "NXDOMIAN" for "rcode", did you mean "NXDOMAIN"?"#,
        )],
    },
    Case {
        name: "dns: bad server addresses",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns: {server: \"dns.internal:53\", name: a.test}",
            "  - id: b",
            "    dns: {server: \"127.0.0.1:99999\", name: a.test}",
        ],
        errors: &[
            (
                3,
                19,
                r#"invalid server address "dns.internal:53": expected IP:PORT (such as 127.0.0.1:53 or [::1]:53) or an IP"#,
            ),
            (5, 19, r#"invalid server address "127.0.0.1:99999""#),
        ],
    },
    Case {
        name: "dns: an invalid re: answer",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns:",
            "      server: 127.0.0.1",
            "      name: a.test",
            "      expect:",
            "        answers: [\"10.0.0.5\", \"re:^10\\\\.(0\"]",
        ],
        errors: &[(
            7,
            31,
            r#"invalid regex "re:^10\\.(0" in "answers": unclosed group"#,
        )],
    },
    Case {
        name: "dns: missing and invalid names",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns:",
            "      server: 127.0.0.1",
            "  - id: b",
            "    dns: {server: 127.0.0.1, name: \"a..test\"}",
        ],
        errors: &[
            (4, 7, r#"missing field "name" in dns"#),
            (6, 36, r#"invalid DNS name "a..test": "#),
        ],
    },
    Case {
        name: "dns: unknown keys with suggestions",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns:",
            "      server: 127.0.0.1",
            "      name: a.test",
            "      transprot: tcp",
            "      expect: {min_answer: 2}",
        ],
        errors: &[
            (
                6,
                7,
                r#"unknown field "transprot" in dns, did you mean "transport"?"#,
            ),
            (
                7,
                16,
                r#"unknown field "min_answer" in expect, did you mean "min_answers"?"#,
            ),
        ],
    },
    Case {
        name: "dns: bad latency_over, negative min_answers, and a second probe",
        yaml: &[
            "targets:",
            "  - id: a",
            "    dns:",
            "      server: 127.0.0.1",
            "      name: a.test",
            "      expect: {min_answers: -1}",
            "      degraded_if: {latency_over: fast}",
            "  - id: b",
            "    tcp: {address: \"a:1\"}",
            "    dns: {server: 127.0.0.1, name: a.test}",
        ],
        errors: &[
            (
                6,
                29,
                r#"invalid value for "dns.expect.min_answers": expected an integer between 0 and 4294967295, found integer -1"#,
            ),
            (7, 35, r#"invalid duration "fast" for "latency_over""#),
            (
                10,
                5,
                r#"target "b" has more than one probe: keep only one"#,
            ),
        ],
    },
    Case {
        name: "tls probe keys are checked",
        yaml: &[
            "targets:",                                                                   // 1
            "  - id: a",                                                                  // 2
            "    tls: {address: \"a:443\", starttls: smtps}",                             // 3
            "  - id: b",                                                                  // 4
            "    tls: {address: \"b:443\", expires_within: soon}",                        // 5
            "  - id: c",                                                                  // 6
            "    tls: {address: \"c:443\", ca_file: ca.pem, insecure_skip_verify: true}", // 7
            "  - id: d",                                                                  // 8
            "    tls: {server_name: d}",                                                  // 9
            "  - id: e",                                                                  // 10
            "    tls: {address: \"e:443\", server_name: \"not a name!\"}",                // 11
            "  - id: f",                                                                  // 12
            "    tls: {address: \"f:443\", expire_within: 14d}",                          // 13
            "  - id: g",                                                                  // 14
            "    tls: {address: g}",                                                      // 15
            "  - id: h",                                                                  // 16
            "    tcp: {address: \"h:1\"}",                                                // 17
            "    tls: {address: \"h:443\", expires_within: 500d}",                        // 18
        ],
        errors: &[
            (
                3,
                39,
                r#"unknown protocol "smtps" for "starttls", did you mean "smtp"?"#,
            ),
            (5, 45, r#"invalid duration "soon" for "expires_within""#),
            (
                7,
                29,
                r#""insecure_skip_verify" and "ca_file" are mutually exclusive"#,
            ),
            (9, 10, r#"missing field "address""#),
            (11, 42, r#"invalid server name "not a name!""#),
            (
                13,
                29,
                r#"unknown field "expire_within" in tls, did you mean "expires_within"?"#,
            ),
            (15, 20, "has no port"),
            (18, 5, r#"target "h" has more than one probe"#),
            (
                18,
                45,
                r#"expires_within must be at most 1year, got "500d""#,
            ),
        ],
    },
    Case {
        name: "grpc probe keys are checked",
        yaml: &[
            "targets:",                                                                    // 1
            "  - id: a",                                                                   // 2
            "    grpc: {address: a}",                                                      // 3
            "  - id: b",                                                                   // 4
            "    grpc: {address: \"b:1\", servce: x}",                                     // 5
            "  - id: c",                                                                   // 6
            "    grpc: {address: \"c:1\", tls: {ca_file: x, insecure_skip_verify: true}}", // 7
            "  - id: d",                                                                   // 8
            "    grpc: {address: \"d:1\", metadata: {\"bad name\": x}}",                   // 9
            "  - id: e",                                                                   // 10
            "    grpc: {address: \"e:1\", degraded_if: {latency_over: fast}}",             // 11
            "  - id: f",                                                                   // 12
            "    grpc: {address: \"f:1\", metadata: {authorization: \"${UNSET_FOR_CONFIG_TEST}\"}}", // 13
            "  - id: g",                                             // 14
            "    grpc: {address: \"g:1\", fresh_connection: maybe}", // 15
        ],
        errors: &[
            (3, 21, "has no port"),
            (
                5,
                28,
                r#"unknown field "servce" in grpc, did you mean "service"?"#,
            ),
            (
                7,
                34,
                r#""insecure_skip_verify" and "ca_file" are mutually exclusive"#,
            ),
            (9, 39, r#"invalid header name "bad name""#),
            (11, 56, r#"invalid duration "fast" for "latency_over""#),
            (13, 54, "UNSET_FOR_CONFIG_TEST"),
            (15, 46, "invalid type"),
        ],
    },
    Case {
        name: "addresses policies are checked in every section that connects",
        yaml: &[
            "targets:",                                        // 1
            "  - id: a",                                       // 2
            "    tcp: {address: \"a:1\", addresses: alll}",    // 3
            "  - id: b",                                       // 4
            "    http: {url: \"http://b/\", addresses: each}", // 5
            "  - id: c",                                       // 6
            "    grpc: {address: \"c:1\", addresses: ayn}",    // 7
            "  - id: d",                                       // 8
            "    tls: {address: \"d:443\", addresses: [all]}", // 9
        ],
        errors: &[
            (
                3,
                38,
                r#"unknown policy "alll" for "addresses", did you mean "all"?"#,
            ),
            (
                5,
                41,
                r#"unknown policy "each" for "addresses"; expected one of first, any, all"#,
            ),
            (
                7,
                39,
                r#"unknown policy "ayn" for "addresses", did you mean "any"?"#,
            ),
            (9, 40, "invalid type"),
        ],
    },
];

#[test]
fn invalid_documents_report_every_error_where_it_is() {
    assert!(CASES.len() >= 18);
    let mut failures = Vec::new();
    for case in CASES {
        let text = doc(case.yaml);
        let errors = match parse(&text) {
            Ok(config) => {
                failures.push(format!(
                    "{}: parsed, with {} targets",
                    case.name,
                    config.topology.targets.len()
                ));
                continue;
            }
            Err(errors) => errors.0,
        };
        let matches = errors.len() == case.errors.len()
            && errors
                .iter()
                .zip(case.errors)
                .all(|(got, &(line, column, message))| {
                    got.file == Path::new("t.yaml")
                        && got.line == line
                        && got.column == column
                        && got.message.contains(message)
                });
        if !matches {
            let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
            let want: Vec<String> = case
                .errors
                .iter()
                .map(|(line, column, message)| format!("t.yaml:{line}:{column}: {message}"))
                .collect();
            failures.push(format!(
                "{}:\n  got:\n    {}\n  want:\n    {}",
                case.name,
                got.join("\n    "),
                want.join("\n    ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn errors_display_one_per_line_with_location() {
    let text = doc(&[
        "targets:",
        "  - id: a",
        "    intervall: 5s",
        "    tcp: {address: \"a:1\"}",
        "  - id: b",
        "    tcp: {address: \"b\"}",
    ]);
    let errors = parse(&text).expect_err("invalid");
    assert_eq!(
        errors.to_string(),
        "t.yaml:3:5: unknown field \"intervall\" in target, did you mean \"interval\"?\n\
         t.yaml:6:20: address \"b\" has no port; expected HOST:PORT or [IPV6]:PORT"
    );
    assert_eq!(
        errors.0[0],
        ConfigError {
            file: "t.yaml".into(),
            line: 3,
            column: 5,
            message: r#"unknown field "intervall" in target, did you mean "interval"?"#.into(),
        }
    );
}

#[test]
fn control_characters_in_values_stay_on_one_line() {
    let errors = parse("targets:\n  - id: \"a\\nb\"\n    tcp: {address: \"a:1\"}\n")
        .expect_err("invalid id");
    let text = errors.to_string();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("t.yaml:2:9: target id \"a\\nb\""),
        "{text}"
    );
}

#[test]
fn defaults_apply_to_targets() {
    let config = parse_ok(&doc(&[
        "defaults:",
        "  interval: 10s",
        "  timeout: 2s",
        "  rise: 4",
        "  fall: 5",
        "  jitter: 0.2",
        "  fast_interval: 3s",
        "  backoff: { max: 60s, jitter: 0.3 }",
        "targets:",
        "  - id: orders-db",
        "    tcp:",
        "      address: 127.0.0.1:5432",
    ]));
    assert_eq!(config.files, vec![Path::new("t.yaml").to_path_buf()]);
    assert_eq!(config.topology.targets.len(), 1);
    let target = &config.topology.targets[0];
    assert_eq!(target.id.as_str(), "orders-db");
    let s = &target.schedule;
    assert_eq!(s.interval(), Duration::from_secs(10));
    assert_eq!(s.timeout(), Duration::from_secs(2));
    assert_eq!(s.jitter(), 0.2);
    assert_eq!(s.fast_interval(), Duration::from_secs(3));
    assert_eq!(s.backoff().min(), Duration::from_secs(10));
    assert_eq!(s.backoff().max(), Duration::from_secs(60));
    assert_eq!(s.backoff().jitter(), 0.3);
    assert_eq!(target.thresholds.rise.get(), 4);
    assert_eq!(target.thresholds.fall.get(), 5);
}

#[test]
fn target_keys_override_defaults_field_by_field() {
    let config = parse_ok(&doc(&[
        "defaults:",
        "  interval: 10s",
        "  timeout: 2s",
        "  rise: 4",
        "  backoff: {max: 60s, jitter: 0.3}",
        "targets:",
        "  - id: a",
        "    interval: 30s",
        "    rise: 1",
        "    fall: 7",
        "    backoff: {jitter: 0.9}",
        "    tcp: {address: \"a:1\"}",
        "  - id: b",
        "    tcp: {address: \"b:1\"}",
    ]));
    let a = &config.topology.targets[0];
    assert_eq!(a.schedule.interval(), Duration::from_secs(30));
    assert_eq!(a.schedule.timeout(), Duration::from_secs(2));
    assert_eq!(a.schedule.fast_interval(), Duration::from_secs(15));
    assert_eq!(a.schedule.backoff().max(), Duration::from_secs(60));
    assert_eq!(a.schedule.backoff().jitter(), 0.9);
    assert_eq!(a.thresholds.rise.get(), 1);
    assert_eq!(a.thresholds.fall.get(), 7);
    let b = &config.topology.targets[1];
    assert_eq!(b.schedule.interval(), Duration::from_secs(10));
    assert_eq!(b.thresholds.rise.get(), 4);
    assert_eq!(b.thresholds.fall.get(), 3);
}

#[test]
fn built_in_defaults_when_nothing_is_set() {
    let config = parse_ok("targets:\n  - id: a\n    tcp: {address: \"a:1\"}\n");
    let target = &config.topology.targets[0];
    // The README's documented defaults, written out: not the library's own constants, which
    // are what is under test.
    let schedule = &target.schedule;
    assert_eq!(schedule.interval(), Duration::from_secs(5));
    assert_eq!(schedule.timeout(), Duration::from_secs(1));
    assert_eq!(schedule.jitter(), 0.1);
    assert_eq!(schedule.fast_interval(), Duration::from_millis(2500));
    assert_eq!(schedule.backoff().max(), Duration::from_secs(20));
    assert_eq!(schedule.backoff().jitter(), 0.5);
    let t = &target.thresholds;
    assert_eq!(
        (t.rise.get(), t.fall.get(), t.degrade.get(), t.recover.get()),
        (2, 3, 2, 2)
    );
    assert_eq!(target.dns_stale_for, Duration::from_secs(300));
    assert_eq!(
        tcp(&config, 0),
        &TcpSpec::connect("a:1".parse().expect("address"))
    );
}

#[test]
fn tcp_section_is_fully_mapped() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: redis",
        "    tcp:",
        "      address: \"[::1]:6379\"",
        "      send: \"PING\\r\\n\"",
        "      expect: \"+PONG\"",
        "      close: graceful",
        "  - id: redis.regex",
        "    tcp:",
        "      address: cache.internal:6379",
        "      send: \"\\x00\\t\"",
        "      expect_regex: \"^\\\\+PO+NG\"",
        "      close: reset",
    ]));
    let redis = tcp(&config, 0);
    let v6: SocketAddr = "[::1]:6379".parse().expect("socket address");
    assert_eq!(redis.address, Address::Socket(v6));
    assert_eq!(redis.send(), Some(&b"PING\r\n"[..]));
    assert_eq!(
        redis.expect(),
        Some(&TcpExpect::Contains(b"+PONG".to_vec()))
    );
    assert_eq!(redis.close, CloseMode::Graceful);

    let regex = tcp(&config, 1);
    assert_eq!(
        regex.address,
        Address::Host {
            host: "cache.internal".into(),
            port: 6379
        }
    );
    assert_eq!(regex.send(), Some(&b"\x00\t"[..]));
    match regex.expect() {
        Some(TcpExpect::Regex(re)) => {
            assert_eq!(re.as_str(), r"^\+PO+NG");
            assert!(re.is_match(b"+POOONG\r\n"));
        }
        other => panic!("expected a regex, got {other:?}"),
    }
    assert_eq!(regex.close, CloseMode::Reset);
}

#[test]
fn plain_scalars_are_read_as_strings_where_strings_are_expected() {
    // `1234` is an integer and `true` a boolean to YAML; as an id or a payload they are text.
    let config = parse_ok("targets:\n  - id: 1234\n    tcp: {address: \"a:1\", send: true}\n");
    assert_eq!(config.topology.targets[0].id.as_str(), "1234");
    assert_eq!(tcp(&config, 0).send(), Some(&b"true"[..]));
}

#[test]
fn anchors_and_merge_keys_work() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: a",
        "    tcp: &probe {address: \"a:1\", send: hi}",
        "  - id: b",
        "    tcp:",
        "      <<: *probe",
        "      address: \"b:1\"",
    ]));
    assert_eq!(tcp(&config, 1).send(), Some(&b"hi"[..]));
    assert_eq!(tcp(&config, 1).address, "b:1".parse().expect("address"));
}

#[test]
fn empty_documents_are_valid() {
    for text in [
        "",
        "# nothing yet\n",
        "targets: []\n",
        "targets:\n",
        "defaults: {interval: 9s}\n",
        "---\n",
    ] {
        let config = parse_ok(text);
        assert!(config.topology.targets.is_empty(), "{text:?}");
    }
}

#[test]
fn hostile_documents_fail_cleanly() {
    let deep = format!("targets: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
    let bomb = doc(&[
        "targets: []",
        "defaults:",
        "  jitter: &a [x, x, x, x, x, x, x, x, x, x]",
        "  rise: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]",
        "  fall: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]",
        "  interval: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]",
        "  timeout: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]",
        "  fast_interval: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]",
    ]);
    let overflow = "targets:\n  - id: a\n    interval: 99999999999999999999999years\n    tcp: {address: \"a:1\"}\n";
    let huge_int = "targets:\n  - id: a\n    rise: 999999999999999999999999999999999999999999\n    tcp: {address: \"a:1\"}\n";
    let nan = "defaults:\n  jitter: .nan\n  backoff: {jitter: .inf}\ntargets: []\n";
    for text in [
        deep.as_str(),
        bomb.as_str(),
        overflow,
        huge_int,
        nan,
        "\u{0}",
        "targets: [\"\\ud800\"]",
    ] {
        let errors = parse(text).expect_err("hostile input must be rejected");
        assert!(!errors.0.is_empty());
    }

    // Thousands of bad targets: every one reported, in bounded time.
    let mut many = String::from("targets:\n");
    for i in 0..2_000 {
        many.push_str(&format!(
            "  - id: t{i}\n    intervall: 5s\n    tcp: {{address: \"h:1\"}}\n"
        ));
    }
    assert_eq!(parse(&many).expect_err("typos").0.len(), 2_000);

    // A target with thousands of unknown keys: reporting stops after a bound.
    let mut keys = String::from("targets:\n  - id: a\n");
    for i in 0..5_000 {
        keys.push_str(&format!("    k{i}: 1\n"));
    }
    let errors = parse(&keys).expect_err("unknown keys").0;
    assert!(errors.len() < 100, "{} errors", errors.len());
    assert!(errors.iter().any(|e| e.message.contains("too many errors")));
}

fn write(dir: &Path, name: &str, lines: &[&str]) -> std::path::PathBuf {
    let path = dir.join(name);
    fs::write(&path, doc(lines)).expect("write test file");
    path
}

#[test]
fn a_directory_of_files_is_merged_in_name_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = write(
        dir.path(),
        "b.yml",
        &["targets:", "  - id: b1", "    tcp: {address: \"b:1\"}"],
    );
    let a = write(
        dir.path(),
        "a.yaml",
        &[
            "defaults: {interval: 20s}",
            "targets:",
            "  - id: a1",
            "    tcp: {address: \"a:1\"}",
            "  - id: a2",
            "    tcp: {address: \"a:2\"}",
        ],
    );
    // Not YAML by name, and not recursed into: both ignored even though invalid.
    write(dir.path(), "notes.txt", &["not: [yaml"]);
    fs::create_dir(dir.path().join("sub")).expect("subdir");
    write(&dir.path().join("sub"), "c.yaml", &["not: [yaml"]);

    let config = config::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.files, vec![a, b]);
    let ids: Vec<&str> = config
        .topology
        .targets
        .iter()
        .map(|t| t.id.as_str())
        .collect();
    assert_eq!(ids, ["a1", "a2", "b1"]);
    // Defaults stay in their file.
    assert_eq!(
        config.topology.targets[0].schedule.interval(),
        Duration::from_secs(20)
    );
    assert_eq!(
        config.topology.targets[2].schedule.interval(),
        Schedule::DEFAULT_INTERVAL
    );
}

#[test]
fn a_single_file_can_be_loaded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write(
        dir.path(),
        "probes.conf",
        &["targets:", "  - id: a", "    tcp: {address: \"a:1\"}"],
    );
    let config = config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.files, vec![file]);
    assert_eq!(config.topology.targets.len(), 1);
}

#[test]
fn duplicate_ids_across_files_name_both_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = write(
        dir.path(),
        "10-db.yaml",
        &["targets:", "  - id: db", "    tcp: {address: \"a:1\"}"],
    );
    let second = write(
        dir.path(),
        "20-more.yaml",
        &[
            "targets:",
            "  - id: other",
            "    tcp: {address: \"a:1\"}",
            "  - id: db",
            "    tcp: {address: \"a:2\"}",
        ],
    );
    let errors = config::load(dir.path()).expect_err("duplicate").0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = &errors[0];
    assert_eq!(error.file, second);
    assert_eq!((error.line, error.column), (4, 9));
    assert_eq!(
        error.message,
        format!(
            "duplicate target id \"db\" (first defined at {}:2:9)",
            first.display()
        )
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}:4:9: ", second.display()))
    );
}

#[test]
fn errors_of_all_files_are_reported_in_file_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = write(
        dir.path(),
        "a.yaml",
        &["targets:", "  - id: a", "    tcp: {adress: x}"],
    );
    let b = write(dir.path(), "b.yaml", &["targets: ["]);
    let c = write(
        dir.path(),
        "c.yaml",
        &[
            "targets:",
            "  - id: c",
            "    timeout: 1",
            "    tcp: {address: \"c:1\"}",
        ],
    );
    let errors = config::load(dir.path()).expect_err("invalid").0;
    let got: Vec<(&Path, u64, u64)> = errors
        .iter()
        .map(|e| (e.file.as_path(), e.line, e.column))
        .collect();
    assert_eq!(
        got,
        [
            (a.as_path(), 3, 11),
            (b.as_path(), 1, 10),
            (c.as_path(), 3, 14)
        ],
        "{errors:?}"
    );
}

#[test]
fn unreadable_paths_and_empty_directories_are_errors() {
    let dir = tempfile::tempdir().expect("temp dir");

    let missing = dir.path().join("missing.yaml");
    let errors = config::load(&missing).expect_err("missing").0;
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].file, missing);
    assert_eq!((errors[0].line, errors[0].column), (0, 0));
    assert!(
        errors[0].message.starts_with("cannot read: "),
        "{}",
        errors[0]
    );
    assert!(
        errors[0]
            .to_string()
            .starts_with(&format!("{}: cannot read", missing.display()))
    );

    write(dir.path(), "README.md", &["# no yaml here"]);
    let errors = config::load(dir.path()).expect_err("no yaml files").0;
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].file, dir.path());
    assert_eq!(
        errors[0].message,
        "no *.yaml or *.yml files in this directory"
    );

    let binary = dir.path().join("bad.yaml");
    fs::write(&binary, b"targets: [\xff]\n").expect("write");
    let errors = config::load(&binary).expect_err("not UTF-8").0;
    assert_eq!(errors[0].file, binary);
    assert!(
        errors[0].message.contains("not valid UTF-8"),
        "{}",
        errors[0]
    );
}

#[test]
fn an_empty_file_in_a_directory_is_valid() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "empty.yaml", &[""]);
    let config = config::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.topology.targets.is_empty());
    assert_eq!(config.files.len(), 1);
}

#[test]
fn http_section_is_fully_mapped() {
    let text = doc(&[
        "targets:",
        "  - id: orders-api",
        "    http:",
        "      url: http://127.0.0.1:8080/ready",
        "      method: post",
        "      headers: { Authorization: \"Bearer ${ORDERS_TOKEN}\", X-Price: \"$$5\" }",
        "      body: '{\"probe\": true}'",
        "      tls: { insecure_skip_verify: true }",
        "      follow_redirects: true",
        "      fresh_connection: true",
        "      expect:",
        "        status: [200, 204, \"3xx\"]",
        "        body_contains: ok",
        "        json: { \"$.status\": UP, \"$.count\": 3, \"$.ok\": true, \"$.error\": null, \"$[\\\"a.b\\\"][0]\": 1.5 }",
        "        header: { Content-Type: application/json }",
        "      degraded_if:",
        "        latency_over: 300ms",
        "        json: { \"$.mode\": readonly }",
        "      signals:",
        "        - name: StockReservationFailed",
        "          severity: high",
        "          when: { status: [503], header: { x-reason: inventory_shortage }, json: { \"$.error.code\": OUT_OF_STOCK } }",
        "        - { name: Slow, severity: info, when: { status: 2xx } }",
        "  - id: minimal",
        "    http: { url: \"https://example.invalid/\" }",
    ]);
    let env = |name: &str| (name == "ORDERS_TOKEN").then(|| "t0k3n".to_owned());
    let config =
        config::parse_with_env(Path::new("t.yaml"), &text, &env).unwrap_or_else(|e| panic!("{e}"));
    let spec = http(&config, 0);
    assert_eq!(spec.url.to_string(), "http://127.0.0.1:8080/ready");
    assert_eq!(spec.method, Method::POST);
    let headers = spec.headers.expose();
    assert_eq!(headers["authorization"], "Bearer t0k3n");
    assert_eq!(headers["x-price"], "$5");
    assert_eq!(spec.body.as_deref(), Some(&br#"{"probe": true}"#[..]));
    assert_eq!(spec.tls, TlsTrust::InsecureSkipVerify);
    assert!(spec.follow_redirects && spec.fresh_connection);

    let code = StatusPattern::Code;
    assert_eq!(
        spec.expect.status,
        StatusSet::new(vec![code(200), code(204), StatusPattern::Class(3)]).unwrap()
    );
    assert_eq!(spec.expect.body_contains.as_deref(), Some("ok"));
    let m = |path: &str, value| JsonMatch::is(path.parse().unwrap(), value);
    assert_eq!(
        spec.expect.json,
        vec![
            m("$.status", JsonScalar::String("UP".into())),
            m("$.count", JsonScalar::Number(3.into())),
            m("$.ok", JsonScalar::Bool(true)),
            m("$.error", JsonScalar::Null),
            m(
                r#"$["a.b"][0]"#,
                JsonScalar::Number(serde_json::Number::from_f64(1.5).unwrap())
            ),
        ]
    );
    assert_eq!(
        spec.expect.headers,
        vec![HeaderMatch {
            name: probe::tier::http::header::CONTENT_TYPE,
            value: "application/json".into(),
        }]
    );
    assert_eq!(
        spec.degraded_if.latency_over,
        Some(Duration::from_millis(300))
    );
    assert_eq!(
        spec.degraded_if.json,
        vec![m("$.mode", JsonScalar::String("readonly".into()))]
    );
    assert_eq!(spec.signals.len(), 2);
    let rule = &spec.signals[0];
    assert_eq!(&*rule.signal().name, "StockReservationFailed");
    assert_eq!(rule.signal().severity, Severity::High);
    assert_eq!(
        rule.when().status,
        Some(StatusSet::new(vec![code(503)]).unwrap())
    );
    assert_eq!(rule.when().headers.len(), 1);
    assert_eq!(
        rule.when().json,
        vec![m("$.error.code", JsonScalar::String("OUT_OF_STOCK".into()))]
    );
    assert_eq!(spec.signals[1].signal().severity, Severity::Info);
    // A single status needs no list.
    assert_eq!(
        spec.signals[1].when().status,
        Some(StatusSet::new(vec![StatusPattern::Class(2)]).unwrap())
    );

    let minimal = http(&config, 1);
    assert_eq!(
        minimal,
        &HttpSpec::get("https://example.invalid/".parse().unwrap())
    );
}

#[test]
fn ca_files_are_read_relative_to_the_config_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).expect("CA");
    fs::create_dir(dir.path().join("certs")).expect("mkdir");
    fs::write(dir.path().join("certs/ca.pem"), ca.pem()).expect("write CA");
    fs::write(dir.path().join("certs/garbage.pem"), "not a certificate").expect("write");

    let file = write(
        dir.path(),
        "api.yaml",
        &[
            "targets:",
            "  - id: api",
            "    http:",
            "      url: https://127.0.0.1:8443/",
            "      tls: {ca_file: certs/ca.pem}",
        ],
    );
    let config = config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    match &http(&config, 0).tls {
        TlsTrust::WithCa(bundle) => {
            assert_eq!(bundle.certificates(), std::slice::from_ref(ca.der()));
        }
        other => panic!("expected a CA, got {other:?}"),
    }

    let file = write(
        dir.path(),
        "api.yaml",
        &[
            "targets:",
            "  - id: api",
            "    http:",
            "      url: https://127.0.0.1:8443/",
            "      tls: {ca_file: certs/garbage.pem}",
        ],
    );
    let errors = config::load(&file).expect_err("not a CA").0;
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].line, errors[0].column), (5, 22));
    assert_eq!(errors[0].message, "no certificate in CA file");
}

#[test]
fn thresholds_flap_and_maintenance_are_mapped() {
    let config = parse_ok(&doc(&[
        "defaults:",
        "  rise: 3",
        "  degrade_after: 4",
        "  flap: { transitions: 6, window: 10m }",
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\"}",
        "  - id: b",
        "    recover_after: 5",
        "    degrade_after: 1",
        "    flap: false",
        "    tcp: {address: \"a:1\"}",
        "    maintenance:",
        "      - { start: \"2026-12-01T02:00:00Z\", duration: 1h }",
        "      - { daily: \"02:00\", duration: 30m }",
        "      - { daily: \"23:30:15\", duration: 24h }",
        "  - id: c",
        "    flap: true",
        "    tcp: {address: \"a:1\"}",
    ]));
    let n = |v| NonZeroU32::new(v).unwrap();
    let a = &config.topology.targets[0];
    assert_eq!(
        a.thresholds,
        Thresholds {
            rise: n(3),
            fall: n(3),
            degrade: n(4),
            // Not set anywhere: follows rise.
            recover: n(3),
        }
    );
    assert_eq!(
        a.flap,
        Some(FlapPolicy {
            transitions: 6,
            window: Duration::from_secs(600),
            min_stable: FlapPolicy::default().min_stable,
        })
    );
    assert!(a.maintenance.is_empty());

    let b = &config.topology.targets[1];
    assert_eq!((b.thresholds.degrade, b.thresholds.recover), (n(1), n(5)));
    assert_eq!(b.flap, None);
    let once = humantime::parse_rfc3339("2026-12-01T02:00:00Z").unwrap();
    assert_eq!(
        b.maintenance,
        vec![
            MaintenanceWindow::try_new(WindowStart::Once(once), Duration::from_secs(3600)).unwrap(),
            MaintenanceWindow::try_new(
                WindowStart::Daily(Duration::from_secs(2 * 3600)),
                Duration::from_secs(1800)
            )
            .unwrap(),
            MaintenanceWindow::try_new(
                WindowStart::Daily(Duration::from_secs(23 * 3600 + 30 * 60 + 15)),
                Duration::from_secs(86_400)
            )
            .unwrap(),
        ]
    );
    assert!(once > SystemTime::UNIX_EPOCH);

    let c = &config.topology.targets[2];
    assert_eq!(c.flap, Some(FlapPolicy::default()));
    assert_eq!(c.thresholds.degrade, n(4));

    // Nothing set: the README's defaults (6 changes in 5 minutes, 2 stable minutes).
    let plain = parse_ok("targets:\n  - id: a\n    tcp: {address: \"a:1\"}\n");
    assert_eq!(
        plain.topology.targets[0].flap,
        Some(FlapPolicy {
            transitions: 6,
            window: Duration::from_secs(300),
            min_stable: Duration::from_secs(120),
        })
    );
}

#[test]
fn dependencies_groups_scoring_and_readiness_are_mapped() {
    use probe::graph::{Dependency, GraphConfig, NodeKind, NodeSpec, ReadinessPolicy};
    let config = parse_ok(&doc(&[
        "scoring: {window: 10, degraded_credit: 0.25, critical_cap: 0.1}",
        "readiness: {require: [checkout], min_score: 0.9, hysteresis: 0.02}",
        "targets:",
        "  - id: checkout",
        "    kind: group",
        "    depends_on:",
        "      - {target: orders-api, weight: 0.6, critical: true}",
        "      - {target: cache, weight: 0.4}",
        "  - id: orders-api",
        "    tcp: {address: \"a:1\"}",
        "    depends_on: [{target: orders-db}]",
        "  - id: orders-db",
        "    tcp: {address: \"a:2\"}",
        "  - id: cache",
        "    tcp: {address: \"a:3\"}",
    ]));
    let topology = &config.topology;
    let ids: Vec<&str> = topology.targets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["orders-api", "orders-db", "cache"],
        "groups are not probed"
    );
    let id = |s: &str| probe::TargetId::new(s).unwrap();
    let dependency = |target: &str, weight: f64, critical: bool, line: u32| Dependency {
        target: id(target),
        weight,
        critical,
        origin: format!("t.yaml:{line}:{}", if line == 11 { 18 } else { 9 }),
    };
    // Only the nodes with dependencies are declared; the other targets are leaves.
    assert_eq!(
        topology.nodes,
        [
            NodeSpec {
                id: id("checkout"),
                kind: NodeKind::Group,
                depends_on: vec![
                    dependency("orders-api", 0.6, true, 7),
                    dependency("cache", 0.4, false, 8),
                ],
            },
            NodeSpec {
                id: id("orders-api"),
                kind: NodeKind::Probed,
                depends_on: vec![dependency(
                    "orders-db",
                    Dependency::DEFAULT_WEIGHT,
                    false,
                    11
                )],
            },
        ]
    );
    assert_eq!(
        topology.scoring,
        GraphConfig::try_new(10, 0.25, 0.1).unwrap()
    );
    assert_eq!(
        topology.readiness,
        Some(ReadinessPolicy::try_new(vec![id("checkout")], 0.9, 0.02).unwrap())
    );

    // Without the sections: default scoring, the all-targets readiness.
    let plain = parse_ok("targets:\n  - id: a\n    tcp: {address: \"a:1\"}\n");
    assert_eq!(plain.topology.scoring, GraphConfig::default());
    assert_eq!(plain.topology.readiness, None);
    assert!(plain.topology.nodes.is_empty());
}

#[test]
fn the_graph_spans_files_and_sections_are_set_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(
        dir.path(),
        "a.yaml",
        &[
            "readiness: {require: [svc]}",
            "targets:",
            "  - id: svc",
            "    kind: group",
            "    depends_on: [{target: db, critical: true}]",
        ],
    );
    let b = write(
        dir.path(),
        "b.yaml",
        &[
            "readiness: {require: [db]}",
            "scoring: {window: 5}",
            "targets:",
            "  - id: db",
            "    tcp: {address: \"a:1\"}",
            "    depends_on: [{target: svc}]",
        ],
    );
    let errors = config::load(dir.path()).unwrap_err();
    let b = b.display();
    let a = dir.path().join("a.yaml");
    let a = a.display();
    assert_eq!(
        errors.to_string(),
        format!(
            "{b}:1:1: readiness is already set at {a}:1:1; set it in one file only\n\
             {b}:6:18: dependency cycle svc -> db -> svc"
        )
    );
    // Fixed: a group in one file depends on a target in another.
    write(
        dir.path(),
        "b.yaml",
        &["targets:", "  - id: db", "    tcp: {address: \"a:1\"}"],
    );
    let config = config::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.topology.nodes.len(), 1);
    assert!(config.topology.readiness.is_some());
}

#[test]
fn the_topology_section_configures_etcd() {
    let config = parse_ok(&doc(&[
        "topology:",
        "  etcd:",
        "    endpoints: [\"https://10.0.0.1:2379\", \"https://10.0.0.2:2379\"]",
        "    prefix: /teams/a/",
        "    username: probe",
        "    password: secret",
        "    tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem}",
        "    resync: 1m",
        "readiness: {require: [checkout]}",
        "targets:",
        "  - id: web",
        "    kind: group",
        "    depends_on: [{target: declared-in-etcd}]",
    ]));
    let etcd = config.etcd.expect("etcd configured");
    assert_eq!(
        etcd.endpoints,
        ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]
    );
    assert_eq!(etcd.prefix, "/teams/a/");
    let credentials = etcd.credentials.expect("credentials");
    assert_eq!(credentials.username, "probe");
    assert_eq!(credentials.password, "secret");
    assert!(!format!("{credentials:?}").contains("secret"));
    let tls = etcd.tls.expect("tls");
    assert_eq!(tls.ca_file.as_deref(), Some(Path::new("ca.pem")));
    assert_eq!(
        tls.client_cert.map(|c| (c.cert_file, c.key_file)),
        Some(("c.pem".into(), "k.pem".into()))
    );
    assert_eq!(etcd.resync_period, Duration::from_secs(60));
    // With etcd, dependencies and required nodes may be declared there.
    assert_eq!(config.topology.nodes.len(), 1);

    let plain = parse_ok("targets: []\n");
    assert_eq!(plain.etcd, None);

    let errors = parse(&doc(&[
        "topology:",
        "  etcd:",
        "    endpoints: [\"http://a:2379\", \"ftp://b\"]",
        "    prefix: \"\"",
        "    username: probe",
        "    tls: {cert_file: c.pem}",
        "    resync: 0s",
        "    colour: red",
    ]))
    .unwrap_err();
    let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            r#"t.yaml:8:5: unknown field "colour" in etcd; expected one of "endpoints", "prefix", "username", "password", "tls", "resync""#,
        ],
        "structural errors first"
    );
    let errors = parse(&doc(&[
        "topology:",
        "  etcd:",
        "    endpoints: [\"http://a:2379\", \"ftp://b\"]",
        "    prefix: \"\"",
        "    username: probe",
        "    tls: {cert_file: c.pem}",
        "    resync: 0s",
    ]))
    .unwrap_err();
    let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            r#"t.yaml:3:17: invalid etcd endpoint "http://a:2379": expected https://HOST:PORT (tls is set)"#,
            r#"t.yaml:3:34: invalid etcd endpoint "ftp://b": expected https://HOST:PORT (tls is set)"#,
            "t.yaml:4:13: prefix must not be empty",
            "t.yaml:5:5: username and password go together: set both or neither",
            "t.yaml:6:5: cert_file and key_file go together: set both or neither",
            "t.yaml:7:13: resync must be greater than zero",
        ]
    );
}

#[test]
fn an_entry_outside_the_files_reads_like_a_targets_item() {
    use probe::topology::Declaration;
    let dir = Path::new("/etc/probe-engine");
    let value = br#"{"id": "db", "tcp": {"address": "127.0.0.1:5432"}, "interval": "2s",
                     "depends_on": [{"target": "disk", "critical": true}]}"#;
    let Declaration::Target { spec, depends_on } =
        config::parse_entry("db", "etcd key /p/db", value, dir).unwrap()
    else {
        panic!("a target")
    };
    assert_eq!(spec.id.as_str(), "db");
    assert_eq!(spec.schedule.interval(), Duration::from_secs(2));
    assert_eq!(depends_on.len(), 1);
    assert!(depends_on[0].critical);
    assert_eq!(depends_on[0].origin, "etcd key /p/db:2:37");

    let group = config::parse_entry(
        "svc",
        "k",
        br#"{"id": "svc", "kind": "group", "depends_on": [{"target": "db"}]}"#,
        dir,
    )
    .unwrap();
    assert!(matches!(group, Declaration::Group { .. }));

    let error = |value: &[u8]| config::parse_entry("db", "k", value, dir).unwrap_err();
    assert_eq!(
        error(br#"{"id": "db", "tcp": {"adress": "a:1"}}"#),
        r#"1:22: unknown field "adress" in tcp, did you mean "address"?"#
    );
    assert_eq!(
        error(br#"{"id": "web", "tcp": {"address": "a:1"}}"#),
        r#"1:8: id "web" does not match the entry's name "db""#
    );
    assert_eq!(
        error(b"[1, 2]"),
        "expected a JSON object: one target declaration"
    );
    assert_eq!(
        error(b"{\"id\": "),
        "1:1: invalid YAML: unclosed bracket '{'"
    );
    assert!(error(b"\xff").starts_with("the value is not UTF-8"));
    assert_eq!(
        error(br#"{"id": "db", "tcp": {"address": "a:1"}, "interval": "1s", "timeout": "2s"}"#),
        "1:59: timeout (2s) must be less than interval (1s)"
    );
}

// ---------------------------------------------------------------------------------------------
// Passive health: circuit breakers on targets, pools (outlier, recovery, slow start) on groups.

fn dns(config: &Config, index: usize) -> &DnsSpec {
    match &config.topology.targets[index].probe {
        ProbeSpec::Dns(dns) => dns,
        other => panic!("expected a dns probe, got {other:?}"),
    }
}

#[test]
fn dns_section_is_fully_mapped() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: internal-dns",
        "    dns:",
        "      server: 127.0.0.1:5353",
        "      name: orders.internal.",
        "      type: mx",
        "      transport: tcp",
        "      expect:",
        "        rcode: nxdomain",
        "        answers: [\"10 mail.internal\", \"re:^20 \"]",
        "        min_answers: 2",
        "      degraded_if: {latency_over: 200ms}",
        "  - id: defaults",
        "    dns: {server: \"::1\", name: orders.internal, expect: {answers: 10.0.0.5}}",
    ]));
    let full = dns(&config, 0);
    assert_eq!(full.server, "127.0.0.1:5353".parse::<SocketAddr>().unwrap());
    assert_eq!(full.name(), "orders.internal");
    assert_eq!(full.record_type, DnsType::Mx);
    assert_eq!(full.transport, DnsTransport::Tcp);
    assert_eq!(full.expect.rcodes, [Rcode::NXDOMAIN]);
    assert_eq!(
        full.expect.answers,
        vec![
            AnswerMatch::parse("10 mail.internal").unwrap(),
            AnswerMatch::parse("re:^20 ").unwrap()
        ]
    );
    assert_eq!(full.expect.min_answers, Some(2));
    assert_eq!(
        full.degraded_if.latency_over,
        Some(Duration::from_millis(200))
    );

    let defaults = dns(&config, 1);
    assert_eq!(defaults.server, "[::1]:53".parse::<SocketAddr>().unwrap());
    assert_eq!(defaults.record_type, DnsType::A);
    assert_eq!(defaults.transport, DnsTransport::Udp);
    assert_eq!(defaults.expect.rcodes, [Rcode::NOERROR]);
    assert_eq!(defaults.expect.min_answers(), 1);
    assert_eq!(
        defaults.expect.answers,
        vec![AnswerMatch::Exact("10.0.0.5".into())]
    );
    assert_eq!(defaults.degraded_if.latency_over, None);
}

#[test]
fn a_dns_probe_without_a_server_asks_the_systems_resolver() {
    let text = doc(&["targets:", "  - id: a", "    dns: {name: a.test}"]);
    match probe::tier::dns::system_server() {
        Ok(system) => assert_eq!(dns(&parse_ok(&text), 0).server, system),
        Err(e) => assert_eq!(
            errors_of(&text),
            [format!(
                "t.yaml:3:5: no \"server\" given, and {e}: add \"server\" (IP:PORT)"
            )]
        ),
    }
}

fn errors_of(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("expected errors, the document is valid:\n{text}"),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}

fn target<'a>(config: &'a Config, id: &str) -> &'a probe::topology::TargetSpec {
    config
        .topology
        .targets
        .iter()
        .find(|t| t.id.as_str() == id)
        .unwrap_or_else(|| panic!("no target {id}"))
}

fn pool(config: &Config, id: &str) -> Option<probe::passive::PoolPolicy> {
    let id = probe::TargetId::new(id).expect("id");
    config.topology.pools.get(&id).copied()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn nz(n: u32) -> Option<NonZeroU32> {
    NonZeroU32::new(n)
}

#[test]
fn passive_health_example_of_the_contract() {
    use probe::passive::PoolPolicy;
    use probe::passive::breaker::{BreakerConfig, Window};
    use probe::passive::outlier::{OutlierConfig, OutlierSettings};
    use probe::passive::recovery::{RecoveryConfig, RecoverySettings};
    use probe::passive::slow_start::SlowStartConfig;

    let config = parse_ok(&doc(&[
        "defaults:",
        "  circuit_breaker: { failure_rate: 0.5, slow_call_duration: 2s, slow_call_rate: 1.0, minimum_calls: 20, window: 60s, open_for: 60s, max_open_for: 10m, half_open_calls: 10 }",
        "  skip_active_after: 20",
        "  outlier: { consecutive_5xx: 5, consecutive_gateway_failures: 3, min_success_rate: 0.8, interval: 10s, min_requests: 100, base_ejection: 30s, max_ejection: 300s, max_ejection_percent: 10, panic_threshold: 0.5 }",
        "  recovery: { cooldown: 30s, max_cooldown: 5m, passes: 3, min_stable: 5m, permanent_after: 10, give_up_after: 5m }",
        "  slow_start: { window: 60s, min_weight: 0.1, aggression: 1.0 }",
        "targets:",
        "  - id: api-1",
        "    http: { url: http://127.0.0.1:8081/health }",
        "    circuit_breaker: { minimum_calls: 10 }",
        "    skip_active_after: 50",
        "  - id: api-2",
        "    http: { url: http://127.0.0.1:8082/health }",
        "  - id: api",
        "    kind: group",
        "    depends_on: [{target: api-1}, {target: api-2}]",
        "    outlier: { consecutive_5xx: 3 }",
        "    recovery: { passes: 2 }",
        "    slow_start: { window: 30s }",
    ]));
    // The values of `defaults` above are the library's defaults.
    let breaker = |minimum_calls| {
        BreakerConfig::builder()
            .window(Window::Time(secs(60)))
            .failure_rate_threshold(0.5)
            .slow_call_duration(secs(2))
            .slow_call_rate_threshold(1.0)
            .minimum_calls(minimum_calls)
            .open_for(secs(60))
            .max_open_for(secs(600))
            .half_open_calls(10)
            .build()
            .expect("valid breaker")
    };
    assert_eq!(breaker(20), BreakerConfig::default());
    let api_1 = target(&config, "api-1");
    assert_eq!(api_1.circuit_breaker, Some(breaker(10)));
    assert_eq!(api_1.skip_active_after, nz(50));
    let api_2 = target(&config, "api-2");
    assert_eq!(api_2.circuit_breaker, Some(breaker(20)));
    assert_eq!(api_2.skip_active_after, nz(20));

    let expected = PoolPolicy {
        outlier: OutlierConfig::try_new(OutlierSettings {
            consecutive_5xx: nz(3),
            ..OutlierSettings::default()
        })
        .unwrap(),
        recovery: RecoveryConfig::try_new(RecoverySettings {
            passes: 2,
            ..RecoverySettings::default()
        })
        .unwrap(),
        slow_start: Some(SlowStartConfig::try_new(secs(30), 0.1, 1.0).unwrap()),
    };
    assert_eq!(pool(&config, "api"), Some(expected));
    assert_eq!(config.topology.pools.len(), 1, "only groups are pools");
}

#[test]
fn passive_health_merges_key_by_key() {
    use probe::passive::PoolPolicy;
    use probe::passive::breaker::{BreakerConfig, Window};
    use probe::passive::outlier::{OutlierConfig, OutlierSettings};
    use probe::passive::recovery::{RecoveryConfig, RecoverySettings};
    use probe::passive::slow_start::SlowStartConfig;

    let config = parse_ok(&doc(&[
        "defaults:",
        "  circuit_breaker: {failure_rate: 0.3, slow_call_duration: 1s, open_for: 10s, max_open_for: 40s}",
        "  outlier: {consecutive_5xx: 7, interval: 5s, max_ejection_percent: 50}",
        "  recovery: {cooldown: 10s, give_up_after: 1m}",
        "  slow_start: {min_weight: 0.25}",
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\"}",
        "    circuit_breaker: {failure_rate: 0.9, slow_call_rate: 0.5, half_open_calls: 3}",
        "  - id: b",
        "    tcp: {address: \"b:1\"}",
        "  - id: pool",
        "    kind: group",
        "    depends_on: [{target: a}, {target: b}]",
        "    outlier: {interval: 20s, panic_threshold: 0}",
        "    recovery: {max_cooldown: 20s, passes: 0, min_stable: 0s}",
        "    slow_start: {aggression: 2}",
        "  - id: defaults-only",
        "    kind: group",
        "    depends_on: [{target: a}]",
    ]));
    let base = || {
        BreakerConfig::builder()
            .failure_rate_threshold(0.3)
            .slow_call_duration(secs(1))
            .open_for(secs(10))
            .max_open_for(secs(40))
    };
    assert_eq!(
        target(&config, "a").circuit_breaker,
        Some(
            base()
                .failure_rate_threshold(0.9)
                .slow_call_rate_threshold(0.5)
                .half_open_calls(3)
                .build()
                .unwrap()
        )
    );
    let b = target(&config, "b").circuit_breaker.expect("from defaults");
    assert_eq!(b, base().build().unwrap());
    assert_eq!(b.window(), Window::Time(BreakerConfig::DEFAULT_WINDOW));
    assert_eq!(target(&config, "b").skip_active_after, None);

    let outlier = |interval, panic_threshold| {
        OutlierConfig::try_new(OutlierSettings {
            consecutive_5xx: nz(7),
            interval: secs(interval),
            max_ejection_percent: 50,
            panic_threshold,
            ..OutlierSettings::default()
        })
        .unwrap()
    };
    assert_eq!(
        pool(&config, "pool"),
        Some(PoolPolicy {
            outlier: outlier(20, 0.0),
            recovery: RecoveryConfig::try_new(RecoverySettings {
                cooldown: secs(10),
                max_cooldown: secs(20),
                passes: 0,
                min_stable: Duration::ZERO,
                give_up_after: Some(secs(60)),
                ..RecoverySettings::default()
            })
            .unwrap(),
            slow_start: Some(
                SlowStartConfig::try_new(SlowStartConfig::DEFAULT_WINDOW, 0.25, 2.0).unwrap()
            ),
        })
    );
    assert_eq!(
        pool(&config, "defaults-only"),
        Some(PoolPolicy {
            outlier: outlier(5, 0.5),
            recovery: RecoveryConfig::try_new(RecoverySettings {
                cooldown: secs(10),
                give_up_after: Some(secs(60)),
                ..RecoverySettings::default()
            })
            .unwrap(),
            slow_start: Some(SlowStartConfig::try_new(secs(60), 0.25, 1.0).unwrap()),
        })
    );
}

#[test]
fn passive_health_is_off_unless_asked_for_and_can_be_opted_out_of() {
    use probe::passive::PoolPolicy;
    use probe::passive::breaker::BreakerConfig;
    use probe::passive::slow_start::SlowStartConfig;

    // Nothing set: no breaker, no pool, always probed.
    let plain = parse_ok(&doc(&[
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\"}",
        "  - id: g",
        "    kind: group",
        "    depends_on: [{target: a}]",
    ]));
    assert_eq!(target(&plain, "a").circuit_breaker, None);
    assert_eq!(target(&plain, "a").skip_active_after, None);
    assert!(plain.topology.pools.is_empty());

    // Empty blocks: the library defaults; slow start is on for pools.
    let empty = parse_ok(&doc(&[
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\"}",
        "    circuit_breaker: {}",
        "  - id: g",
        "    kind: group",
        "    depends_on: [{target: a}]",
        "    outlier: {}",
    ]));
    assert_eq!(
        target(&empty, "a").circuit_breaker,
        Some(BreakerConfig::default())
    );
    assert_eq!(
        pool(&empty, "g"),
        Some(PoolPolicy {
            slow_start: Some(SlowStartConfig::default()),
            ..PoolPolicy::default()
        })
    );

    // Opting out of the defaults' blocks, target by target and group by group.
    let config = parse_ok(&doc(&[
        "defaults:",
        "  circuit_breaker: {minimum_calls: 5}",
        "  outlier: {consecutive_5xx: 2}",
        "  slow_start: {window: 10s}",
        "targets:",
        "  - id: on",
        "    tcp: {address: \"a:1\"}",
        "  - id: off",
        "    tcp: {address: \"b:1\"}",
        "    circuit_breaker: {enabled: false, minimum_calls: 7}",
        "  - id: pool",
        "    kind: group",
        "    depends_on: [{target: on}]",
        "  - id: not-a-pool",
        "    kind: group",
        "    depends_on: [{target: on}]",
        "    outlier: {enabled: false}",
        "  - id: full-weight",
        "    kind: group",
        "    depends_on: [{target: off}]",
        "    slow_start: {enabled: false}",
    ]));
    assert_eq!(
        target(&config, "on").circuit_breaker,
        Some(BreakerConfig::builder().minimum_calls(5).build().unwrap())
    );
    assert_eq!(target(&config, "off").circuit_breaker, None);
    assert_eq!(
        pool(&config, "pool").and_then(|p| p.slow_start),
        Some(SlowStartConfig::try_new(secs(10), 0.1, 1.0).unwrap())
    );
    assert_eq!(pool(&config, "not-a-pool"), None);
    let full = pool(&config, "full-weight").expect("a pool");
    assert_eq!(full.slow_start, None);
    assert_eq!(full.outlier.settings().consecutive_5xx, nz(2));

    // Defaults that are off hold settings; a block of the node's own turns them on.
    let opt_in = parse_ok(&doc(&[
        "defaults:",
        "  circuit_breaker: {enabled: false, minimum_calls: 5}",
        "  outlier: {enabled: false, consecutive_5xx: 2}",
        "  slow_start: {enabled: false, window: 10s}",
        "targets:",
        "  - id: plain",
        "    tcp: {address: \"a:1\"}",
        "  - id: opted-in",
        "    tcp: {address: \"b:1\"}",
        "    circuit_breaker: {}",
        "  - id: plain-group",
        "    kind: group",
        "    depends_on: [{target: plain}]",
        "  - id: pool",
        "    kind: group",
        "    depends_on: [{target: plain}]",
        "    outlier: {enabled: true}",
        "    slow_start: {}",
    ]));
    assert_eq!(target(&opt_in, "plain").circuit_breaker, None);
    assert_eq!(
        target(&opt_in, "opted-in").circuit_breaker,
        Some(BreakerConfig::builder().minimum_calls(5).build().unwrap())
    );
    assert_eq!(pool(&opt_in, "plain-group"), None);
    let pool = pool(&opt_in, "pool").expect("a pool");
    assert_eq!(pool.outlier.settings().consecutive_5xx, nz(2));
    assert_eq!(
        pool.slow_start,
        Some(SlowStartConfig::try_new(secs(10), 0.1, 1.0).unwrap())
    );
}

#[test]
fn zero_turns_outlier_and_recovery_rules_off() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\"}",
        "  - id: g",
        "    kind: group",
        "    depends_on: [{target: a}]",
        "    outlier: {consecutive_5xx: 0, consecutive_gateway_failures: 0, min_success_rate: 0}",
        "    recovery: {permanent_after: 0, give_up_after: 0s}",
    ]));
    let pool = pool(&config, "g").expect("a pool");
    let outlier = pool.outlier.settings();
    assert_eq!(outlier.consecutive_5xx, None);
    assert_eq!(outlier.consecutive_gateway_failures, None);
    assert_eq!(outlier.min_success_rate, None);
    let recovery = pool.recovery.settings();
    assert_eq!(recovery.permanent_after, None);
    assert_eq!(recovery.give_up_after, None);
}

#[test]
fn a_breaker_window_counts_calls_or_seconds() {
    use probe::passive::breaker::{BreakerConfig, Window};
    use std::num::NonZeroUsize;

    let config = parse_ok(&doc(&[
        "defaults:",
        "  circuit_breaker: {window: 30s, minimum_calls: 5}",
        "targets:",
        "  - id: counted",
        "    tcp: {address: \"a:1\"}",
        "    circuit_breaker: {window_calls: 50}",
        "  - id: timed",
        "    tcp: {address: \"b:1\"}",
    ]));
    let count = |n| Window::Count(NonZeroUsize::new(n).unwrap());
    assert_eq!(
        target(&config, "counted").circuit_breaker,
        Some(
            BreakerConfig::builder()
                .window(count(50))
                .minimum_calls(5)
                .build()
                .unwrap()
        )
    );
    assert_eq!(
        target(&config, "timed").circuit_breaker.map(|b| b.window()),
        Some(Window::Time(secs(30)))
    );

    // And the other way round: a time window on the target replaces a count in the defaults.
    let config = parse_ok(&doc(&[
        "defaults:",
        "  circuit_breaker: {window_calls: 40}",
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\"}",
        "    circuit_breaker: {window: 2m}",
        "  - id: b",
        "    tcp: {address: \"b:1\"}",
    ]));
    assert_eq!(
        target(&config, "a").circuit_breaker.map(|b| b.window()),
        Some(Window::Time(secs(120)))
    );
    assert_eq!(
        target(&config, "b").circuit_breaker.map(|b| b.window()),
        Some(count(40))
    );
}

#[test]
fn passive_health_on_the_wrong_kind_of_node_says_where_it_belongs() {
    assert_eq!(
        errors_of(&doc(&[
            "targets:",                                // 1
            "  - id: api-1",                           // 2
            "    tcp: {address: \"a:1\"}",             // 3
            "    outlier: {consecutive_5xx: 3}",       // 4
            "    recovery: {passes: 2}",               // 5
            "    slow_start: {window: 30s}",           // 6
            "  - id: api",                             // 7
            "    kind: group",                         // 8
            "    depends_on: [{target: api-1}]",       // 9
            "    circuit_breaker: {minimum_calls: 0}", // 10
            "    skip_active_after: 5",                // 11
            "  - id: plain",                           // 12
            "    kind: group",                         // 13
            "    depends_on: [{target: api-1}]",       // 14
            "    recovery: {passes: 2}",               // 15
            "  - id: off",                             // 16
            "    kind: group",                         // 17
            "    depends_on: [{target: api-1}]",       // 18
            "    outlier: {enabled: false}",           // 19
            "    slow_start: {enabled: false}",        // 20
        ])),
        [
            r#"t.yaml:4:5: outlier judges a group's members against each other: set it on the group (kind: group), not on target "api-1""#,
            r#"t.yaml:5:5: recovery says how a pool's ejected members come back: set it on the group (kind: group), not on target "api-1""#,
            r#"t.yaml:6:5: slow_start ramps a pool's returning members back up: set it on the group (kind: group), not on target "api-1""#,
            r#"t.yaml:10:5: target "api" is a group: circuit_breaker judges the real calls to one target; set it on the targets the group depends on (or in defaults), not on the group"#,
            r#"t.yaml:11:5: target "api" is a group: skip_active_after skips a target's probe runs, and a group has no probe; set it on the targets the group depends on (or in defaults)"#,
            r#"t.yaml:15:5: recovery applies to pools only, and group "plain" is not one (neither it nor the defaults have an outlier block): a group is a pool when it or the defaults have an outlier block"#,
            r#"t.yaml:20:5: slow_start applies to pools only, and group "off" is not one (its outlier block says enabled: false): a group is a pool when it or the defaults have an outlier block"#,
        ]
    );
    // The defaults' blocks that do not apply to a node are simply not applied to it.
    let config = parse_ok(&doc(&[
        "defaults:",
        "  circuit_breaker: {}",
        "  skip_active_after: 3",
        "  recovery: {passes: 1}",
        "  slow_start: {window: 5s}",
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\"}",
        "  - id: g",
        "    kind: group",
        "    depends_on: [{target: a}]",
    ]));
    assert!(config.topology.pools.is_empty());
    assert!(target(&config, "a").circuit_breaker.is_some());
}

#[test]
fn every_invalid_passive_value_is_reported_at_its_place() {
    assert_eq!(
        errors_of(&doc(&[
            "defaults:",                                               // 1
            "  circuit_breaker:",                                      // 2
            "    failure_rate: 0",                                     // 3
            "    slow_call_rate: 1.5",                                 // 4
            "    slow_call_duration: 0s",                              // 5
            "    window: 90m",                                         // 6
            "    minimum_calls: 0",                                    // 7
            "    open_for: 0s",                                        // 8
            "    half_open_calls: 0",                                  // 9
            "    max_open_for: soon",                                  // 10
            "  skip_active_after: 0",                                  // 11
            "targets:",                                                // 12
            "  - id: a",                                               // 13
            "    tcp: {address: \"a:1\"}",                             // 14
            "    circuit_breaker: {window: 1500ms, window_calls: 10}", // 15
            "  - id: b",                                               // 16
            "    tcp: {address: \"b:1\"}",                             // 17
            "    circuit_breaker: {window_calls: 0}",                  // 18
            "    skip_active_after: 0",                                // 19
            "  - id: c",                                               // 20
            "    tcp: {address: \"c:1\"}",                             // 21
            "    circuit_breaker: {window_calls: 100001}",             // 22
        ])),
        [
            "t.yaml:3:19: breaker failure_rate threshold 0 is outside (0, 1]",
            "t.yaml:4:21: breaker slow_call_rate threshold 1.5 is outside (0, 1]",
            "t.yaml:5:25: breaker slow_call_duration must be greater than zero",
            "t.yaml:6:13: breaker time window 5400s is not a whole number of seconds from 1s to 3600s",
            "t.yaml:7:20: breaker minimum_calls must be at least 1",
            "t.yaml:8:15: breaker open_for must be greater than zero",
            "t.yaml:9:22: breaker half_open_calls must be at least 1",
            r#"t.yaml:10:19: invalid duration "soon" for "circuit_breaker.max_open_for": expected number at 0"#,
            "t.yaml:11:22: skip_active_after must be at least 1",
            "t.yaml:15:31: breaker time window 1.5s is not a whole number of seconds from 1s to 3600s",
            r#"t.yaml:15:39: "window" and "window_calls" are mutually exclusive: keep only one"#,
            "t.yaml:18:37: circuit_breaker.window_calls must be at least 1",
            "t.yaml:19:24: skip_active_after must be at least 1",
            "t.yaml:22:37: breaker count window 100001 is larger than 100000 calls",
        ]
    );
    assert_eq!(
        errors_of(&doc(&[
            "targets:",                                                      // 1
            "  - id: db",                                                    // 2
            "    tcp: {address: \"a:1\"}",                                   // 3
            "  - id: pool",                                                  // 4
            "    kind: group",                                               // 5
            "    depends_on: [{target: db}]",                                // 6
            "    outlier:",                                                  // 7
            "      min_success_rate: 1.2",                                   // 8
            "      interval: 0s",                                            // 9
            "      min_requests: 0",                                         // 10
            "      base_ejection: 0s",                                       // 11
            "      max_ejection_percent: 0",                                 // 12
            "      panic_threshold: -0.1",                                   // 13
            "      max_ejection: 2d",                                        // 14
            "    recovery: {cooldown: 0s, min_stable: -1s}",                 // 15
            "    slow_start: {window: 0s, min_weight: 0, aggression: .inf}", // 16
        ])),
        [
            "t.yaml:8:25: outlier min_success_rate 1.2 is outside (0, 1]",
            "t.yaml:9:17: outlier interval must be greater than zero",
            "t.yaml:10:21: outlier min_requests must be at least 1",
            "t.yaml:11:22: outlier base_ejection must be greater than zero",
            "t.yaml:12:29: outlier max_ejection_percent 0 is outside 1..=100",
            "t.yaml:13:24: outlier panic_threshold -0.1 is outside [0, 1]",
            r#"t.yaml:14:21: outlier.max_ejection must be at most 1day, got "2d""#,
            "t.yaml:15:26: recovery cooldown must be greater than zero",
            r#"t.yaml:15:42: invalid duration "-1s" for "recovery.min_stable": expected number at 0"#,
            "t.yaml:16:26: slow-start window must be greater than zero",
            "t.yaml:16:42: slow-start min_weight 0 is outside (0, 1]",
            "t.yaml:16:57: slow-start aggression inf must be a finite number greater than zero",
        ]
    );
}

#[test]
fn passive_settings_that_must_agree_are_checked_once_merged() {
    assert_eq!(
        errors_of(&doc(&[
            "defaults:",                                             // 1
            "  circuit_breaker: {open_for: 20m}",                    // 2
            "  recovery: {give_up_after: 20s}",                      // 3
            "targets:",                                              // 4
            "  - id: a",                                             // 5
            "    tcp: {address: \"a:1\"}",                           // 6
            "    circuit_breaker: {max_open_for: 30m}",              // 7
            "  - id: b",                                             // 8
            "    tcp: {address: \"b:1\"}",                           // 9
            "  - id: c",                                             // 10
            "    tcp: {address: \"c:1\"}",                           // 11
            "    circuit_breaker: {window_calls: 10, open_for: 1m}", // 12
            "  - id: pool",                                          // 13
            "    kind: group",                                       // 14
            "    depends_on: [{target: a}]",                         // 15
            "    outlier: {base_ejection: 60s, max_ejection: 30s}",  // 16
            "    recovery: {max_cooldown: 10s}",                     // 17
            "  - id: pool-2",                                        // 18
            "    kind: group",                                       // 19
            "    depends_on: [{target: a}]",                         // 20
            "    outlier: {}",                                       // 21
        ])),
        [
            // Target b takes open_for from the defaults, with the built-in max_open_for; the
            // error is reported once however many targets inherit it.
            "t.yaml:2:21: breaker open_for (1200s) is greater than max_open_for (600s)",
            // pool-2 takes give_up_after from the defaults, with the built-in cooldown.
            "t.yaml:3:14: recovery give_up_after (20s) is not above cooldown (30s)",
            "t.yaml:12:23: breaker minimum_calls (20) is larger than its count window (10)",
            // Both of pool's errors are reported.
            "t.yaml:16:35: outlier max_ejection (30s) is below base_ejection (60s)",
            "t.yaml:17:16: recovery max_cooldown (10s) is below cooldown (30s)",
        ]
    );
}

#[test]
fn unknown_passive_keys_get_a_suggestion() {
    assert_eq!(
        errors_of(&doc(&[
            "defaults:",                                // 1
            "  circuit_breakr: {}",                     // 2
            "targets:",                                 // 3
            "  - id: a",                                // 4
            "    tcp: {address: \"a:1\"}",              // 5
            "    circuit_breaker: {failure_rat: 0.5}",  // 6
            "    skip_active_afer: 3",                  // 7
            "  - id: g",                                // 8
            "    kind: group",                          // 9
            "    depends_on: [{target: a}]",            // 10
            "    outlier: {consecutive_5xxx: 3}",       // 11
            "    recovery: {pases: 2}",                 // 12
            "    slow_start: {windw: 1s, enabled: no}", // 13
        ])),
        [
            r#"t.yaml:2:3: unknown field "circuit_breakr" in defaults, did you mean "circuit_breaker"?"#,
            r#"t.yaml:6:23: unknown field "failure_rat" in circuit_breaker, did you mean "failure_rate"?"#,
            r#"t.yaml:7:5: unknown field "skip_active_afer" in target, did you mean "skip_active_after"?"#,
            r#"t.yaml:11:15: unknown field "consecutive_5xxx" in outlier, did you mean "consecutive_5xx"?"#,
            r#"t.yaml:12:16: unknown field "pases" in recovery, did you mean "passes"?"#,
            r#"t.yaml:13:18: unknown field "windw" in slow_start, did you mean "window"?"#,
            r#"t.yaml:13:38: invalid type for "slow_start.enabled": expected a boolean, found string "no""#,
        ]
    );
}

#[test]
fn an_entry_outside_the_files_carries_its_pool_and_breaker() {
    use probe::passive::PoolPolicy;
    use probe::passive::breaker::BreakerConfig;
    use probe::passive::outlier::{OutlierConfig, OutlierSettings};
    use probe::passive::slow_start::SlowStartConfig;
    use probe::topology::Declaration;

    let dir = Path::new("/etc/probe-engine");
    let value = br#"{"id": "api", "kind": "group", "depends_on": [{"target": "api-1"}],
                     "outlier": {"consecutive_5xx": 3}, "slow_start": {"enabled": false}}"#;
    let Declaration::Group { id, pool, .. } = config::parse_entry("api", "k", value, dir).unwrap()
    else {
        panic!("a group")
    };
    assert_eq!(id.as_str(), "api");
    assert_eq!(
        pool.as_deref(),
        Some(&PoolPolicy {
            outlier: OutlierConfig::try_new(OutlierSettings {
                consecutive_5xx: nz(3),
                ..OutlierSettings::default()
            })
            .unwrap(),
            slow_start: None,
            ..PoolPolicy::default()
        })
    );
    let plain = br#"{"id": "api", "kind": "group", "depends_on": [{"target": "api-1"}]}"#;
    let Declaration::Group { pool, .. } = config::parse_entry("api", "k", plain, dir).unwrap()
    else {
        panic!("a group")
    };
    assert_eq!(pool, None);
    let with_slow_start = br#"{"id": "api", "kind": "group", "depends_on": [{"target": "a"}],
                               "outlier": {}}"#;
    let Declaration::Group { pool, .. } =
        config::parse_entry("api", "k", with_slow_start, dir).unwrap()
    else {
        panic!("a group")
    };
    assert_eq!(
        pool.and_then(|p| p.slow_start),
        Some(SlowStartConfig::default())
    );

    let value = br#"{"id": "api-1", "http": {"url": "http://10.0.0.7/ready"},
                     "circuit_breaker": {"minimum_calls": 4}, "skip_active_after": 10}"#;
    let Declaration::Target { spec, .. } = config::parse_entry("api-1", "k", value, dir).unwrap()
    else {
        panic!("a target")
    };
    assert_eq!(
        spec.circuit_breaker,
        Some(BreakerConfig::builder().minimum_calls(4).build().unwrap())
    );
    assert_eq!(spec.skip_active_after, nz(10));

    let error = |name: &str, value: &[u8]| config::parse_entry(name, "k", value, dir).unwrap_err();
    assert_eq!(
        error(
            "api",
            br#"{"id": "api", "kind": "group", "depends_on": [{"target": "a"}], "outlier": {"max_ejection_percent": 0}, "recovery": {"cooldown": "0s"}}"#
        ),
        "1:101: outlier max_ejection_percent 0 is outside 1..=100; 1:130: recovery cooldown must be greater than zero"
    );
    assert_eq!(
        error(
            "a",
            br#"{"id": "a", "tcp": {"address": "a:1"}, "outlier": {}}"#
        ),
        r#"1:40: outlier judges a group's members against each other: set it on the group (kind: group), not on target "a""#
    );
}

// ---------------------------------------------------------------------------------------------
// The resolver: the top-level `resolver` section and the per-target `dns_stale_for`.

#[test]
fn dns_stale_for_merges_like_the_schedule_keys() {
    let config = parse_ok(&doc(&[
        "defaults: {dns_stale_for: 30s}",
        "targets:",
        "  - {id: a, tcp: {address: \"db.internal:5432\"}}",
        "  - {id: b, tcp: {address: \"db.internal:5432\"}, dns_stale_for: 0s}",
    ]));
    assert_eq!(target(&config, "a").dns_stale_for, secs(30));
    assert_eq!(target(&config, "b").dns_stale_for, Duration::ZERO);
    let config = parse_ok(&doc(&[
        "targets:",
        "  - {id: a, tcp: {address: \"db.internal:5432\"}}",
    ]));
    assert_eq!(
        target(&config, "a").dns_stale_for,
        probe::topology::TargetSpec::DEFAULT_DNS_STALE_FOR
    );
    assert_eq!(
        config.resolver,
        probe::tier::resolve::ResolverConfig::default()
    );
}

#[test]
fn the_resolver_section_is_read() {
    let config = parse_ok(&doc(&[
        "resolver:",
        "  servers: [\"127.0.0.1:5353\", 10.0.0.2, \"[::1]:53\"]",
        "  timeout: 2s",
        "  attempts: 3",
    ]));
    assert_eq!(
        config.resolver,
        probe::tier::resolve::ResolverConfig {
            servers: Some(vec![
                "127.0.0.1:5353".parse().unwrap(),
                "10.0.0.2:53".parse().unwrap(),
                "[::1]:53".parse().unwrap(),
            ]),
            timeout: Some(secs(2)),
            attempts: Some(3),
            ..probe::tier::resolve::ResolverConfig::default()
        }
    );
    // Only timeouts: the servers stay the system's.
    let config = parse_ok(&doc(&["resolver: {timeout: 500ms}"]));
    assert_eq!(config.resolver.servers, None);
    assert_eq!(config.resolver.timeout, Some(Duration::from_millis(500)));
}

#[test]
fn resolver_errors_are_located() {
    assert_eq!(
        errors_of(&doc(&[
            "resolver:",
            "  servers: [nope, \"127.0.0.1:0\", \"10.0.0.1:53\"]",
            "  timeout: 0s",
            "  attempts: 0",
            "defaults: {dns_stale_for: soon}",
            "targets:",
            "  - {id: a, tcp: {address: \"a:1\"}, dns_stale_for: 2d}",
        ])),
        [
            "t.yaml:2:13: resolver server \"nope\" is not an IP address with an optional port \
             (IP, IP:PORT or [IPV6]:PORT)",
            "t.yaml:2:19: resolver server \"127.0.0.1:0\" has port 0; expected 1-65535",
            "t.yaml:3:12: resolver.timeout must be greater than zero",
            "t.yaml:4:13: resolver.attempts must be between 1 and 10, got 0",
            "t.yaml:5:27: invalid duration \"soon\" for \"dns_stale_for\": expected number at 0",
            "t.yaml:7:51: dns_stale_for must be at most 1day, got \"2d\"",
        ]
    );
    assert_eq!(
        errors_of(&doc(&["resolver:", "  servers: []", "  timeout: 2m",])),
        [
            "t.yaml:2:12: resolver.servers is empty: list at least one server, or leave it out \
             to use /etc/resolv.conf",
            "t.yaml:3:12: resolver.timeout must be at most 1m, got \"2m\"",
        ]
    );
    assert_eq!(
        errors_of(&doc(&["resolver:", "  server: [10.0.0.1]"])),
        ["t.yaml:2:3: unknown field \"server\" in resolver, did you mean \"servers\"?"]
    );
    // A group has no probe, so no name to resolve.
    let errors = errors_of(&doc(&[
        "targets:",
        "  - {id: a, tcp: {address: \"a:1\"}}",
        "  - {id: g, kind: group, depends_on: [{target: a}], dns_stale_for: 1m}",
    ]));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("t.yaml:3:"), "{errors:?}");
    assert!(errors[0].contains("dns_stale_for"), "{errors:?}");
}

#[test]
fn the_resolver_is_set_in_one_file_only() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &["resolver: {servers: [10.0.0.1]}"]);
    let b = write(dir.path(), "b.yaml", &["resolver: {servers: [10.0.0.2]}"]);
    let errors = config::load(dir.path()).unwrap_err();
    let a = dir.path().join("a.yaml");
    assert_eq!(
        errors.to_string(),
        format!(
            "{}:1:1: resolver is already set at {}:1:1; set it in one file only",
            b.display(),
            a.display()
        )
    );
}

// The `metrics` section.

#[test]
fn the_metrics_section_turns_per_target_histograms_off() {
    let config = parse_ok(&doc(&["targets: []"]));
    assert!(config.metrics.per_target_histograms, "on by default");
    let config = parse_ok(&doc(&["metrics: {per_target_histograms: false}"]));
    assert!(!config.metrics.per_target_histograms);
    let config = parse_ok(&doc(&["metrics: {}"]));
    assert!(config.metrics.per_target_histograms);
}

#[test]
fn metrics_errors_are_located() {
    assert_eq!(
        errors_of(&doc(&["metrics:", "  per_target_histogram: false"])),
        [
            "t.yaml:2:3: unknown field \"per_target_histogram\" in metrics, did you mean \
             \"per_target_histograms\"?"
        ]
    );
    let errors = errors_of(&doc(&["metrics: {per_target_histograms: sometimes}"]));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("t.yaml:1:"), "{errors:?}");
    assert!(errors[0].contains("per_target_histograms"), "{errors:?}");
}

#[test]
fn grpc_and_tls_sections_are_fully_mapped() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: payments",
        "    grpc:",
        "      address: payments.internal:50051",
        "      service: payments.v1.Payments",
        "      tls: {insecure_skip_verify: true}",
        "      metadata: {x-probe: \"yes\"}",
        "      fresh_connection: true",
        "      degraded_if: {latency_over: 200ms}",
        "  - id: api-cert",
        "    tls:",
        "      address: \"127.0.0.1:443\"",
        "      server_name: api.internal",
        "      insecure_skip_verify: true",
        "      expires_within: 14d",
        "      starttls: smtp",
    ]));
    let ProbeSpec::Grpc(grpc) = &target(&config, "payments").probe else {
        panic!("expected a gRPC probe");
    };
    assert_eq!(
        grpc.address,
        Address::Host {
            host: "payments.internal".into(),
            port: 50051
        }
    );
    assert_eq!(grpc.service, "payments.v1.Payments");
    assert_eq!(grpc.tls, Some(TlsTrust::InsecureSkipVerify));
    assert_eq!(grpc.metadata.expose()["x-probe"], "yes");
    assert!(grpc.fresh_connection);
    assert_eq!(grpc.latency_over, Some(Duration::from_millis(200)));

    let ProbeSpec::Tls(tls) = &target(&config, "api-cert").probe else {
        panic!("expected a TLS probe");
    };
    assert_eq!(
        tls.address,
        Address::Socket("127.0.0.1:443".parse().unwrap())
    );
    assert_eq!(tls.server_name().to_str(), "api.internal");
    assert_eq!(tls.trust, TlsTrust::InsecureSkipVerify);
    assert_eq!(tls.expires_within, Some(secs(14 * 86_400)));
    assert_eq!(tls.starttls, Some(probe::tier::tls::StartTls::Smtp));

    // A plaintext gRPC probe of the whole server by default.
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: g",
        "    grpc: {address: \"g:1\"}",
    ]));
    let ProbeSpec::Grpc(grpc) = &target(&config, "g").probe else {
        panic!("expected a gRPC probe");
    };
    assert_eq!((grpc.service.as_str(), &grpc.tls), ("", &None));
    assert_eq!(grpc.addresses, probe::Addresses::First);
}

#[test]
fn addresses_policies_are_mapped() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: a",
        "    tcp: {address: \"a:1\", addresses: all}",
        "  - id: b",
        "    http: {url: \"http://b/\", addresses: any}",
    ]));
    use probe::Addresses;
    assert_eq!(tcp(&config, 0).addresses, Addresses::All);
    assert_eq!(http(&config, 1).addresses, Addresses::Any);
}

/// Every example commented out in `probes/example.yaml` is valid once uncommented: the README
/// points users at them.
#[test]
fn the_commented_examples_of_the_default_config_are_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../probes/example.yaml");
    let text = fs::read_to_string(&path).expect("probes/example.yaml");
    let mut examples = vec!["targets:".to_owned()];
    for line in text.lines() {
        // An example line is a commented-out YAML line: "#  - id: ..." or "#    key: ...".
        if let Some(yaml) = line.strip_prefix('#')
            && yaml.starts_with("  ")
        {
            examples.push(yaml.to_owned());
        }
    }
    let yaml = examples
        .join("\n")
        .replace("${PAYMENTS_TOKEN}", "$${PAYMENTS_TOKEN}");
    // The CA file of the gRPC example is the one thing not on this machine.
    let yaml = yaml.replace(
        "tls: { ca_file: ca.pem }",
        "tls: { insecure_skip_verify: true }",
    );
    let config = match parse(&yaml) {
        Ok(config) => config,
        Err(errors) => panic!("{errors}\n---\n{yaml}"),
    };
    for id in [
        "gateway",
        "syslog",
        "api-1",
        "api",
        "internal-dns",
        "payments",
        "api-cert",
        "cache",
    ] {
        assert!(
            config.topology.targets.iter().any(|t| t.id.as_str() == id)
                || config.topology.nodes.iter().any(|n| n.id.as_str() == id),
            "{id} is not among the examples"
        );
    }
}

#[test]
fn icmp_and_udp_sections_are_mapped() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: gateway",
        "    icmp: {host: 10.0.0.1}",
        "  - id: lossy",
        "    icmp:",
        "      host: gw.internal",
        "      count: 5",
        "      size: 1400",
        "      degraded_if: {loss_over: 0.2, latency_over: 50ms}",
        "  - id: syslog",
        "    udp: {address: \"127.0.0.1:514\", send: \"ping\\n\", expect: pong}",
        "  - id: dns",
        "    udp: {address: \"ns.internal:53\", send: \"\\x00\", expect_regex: \"^\\\\x00\"}",
    ]));
    let probes: Vec<&ProbeSpec> = config.topology.targets.iter().map(|t| &t.probe).collect();
    let gateway = IcmpSpec::echo(IcmpHost::Ip("10.0.0.1".parse().unwrap()));
    assert_eq!(probes[0], &ProbeSpec::Icmp(gateway));
    let lossy = IcmpSpec::echo(IcmpHost::Name("gw.internal".into()))
        .with_count(5)
        .and_then(|s| s.with_size(1400))
        .and_then(|s| {
            s.with_degraded_if(IcmpDegradedIf {
                loss_over: Some(0.2),
                latency_over: Some(Duration::from_millis(50)),
            })
        })
        .unwrap();
    assert_eq!(probes[1], &ProbeSpec::Icmp(lossy));
    let syslog = UdpSpec::new("127.0.0.1:514".parse::<Address>().unwrap(), &b"ping\n"[..])
        .unwrap()
        .with_expect(ReplyExpect::Contains(b"pong".to_vec()));
    assert_eq!(probes[2], &ProbeSpec::Udp(syslog));
    let ProbeSpec::Udp(dns) = probes[3] else {
        panic!("expected a udp probe, got {:?}", probes[3]);
    };
    assert_eq!(dns.send(), b"\x00");
    assert!(matches!(dns.expect(), Some(ReplyExpect::Regex(re)) if re.as_str() == r"^\x00"));
}

#[test]
fn icmp_and_udp_errors_are_located() {
    assert_eq!(
        errors_of(&doc(&[
            "targets:",
            "  - id: a",
            "    icmp: {host: \"gw:80\"}",
            "  - id: b",
            "    icmp: {host: 10.0.0.1, count: 0}",
            "  - id: c",
            "    icmp: {host: 10.0.0.1, count: 101, size: 70000}",
            "  - id: d",
            "    icmp: {host: 10.0.0.1, count: 3, degraded_if: {loss_over: 1.5}}",
            "  - id: e",
            "    icmp: {host: 10.0.0.1, degraded_if: {loss_over: 0.2}}",
            "  - id: f",
            "    icmp: {host: 10.0.0.1, timeout: 1s}",
            "  - id: g",
            "    icmp: {host: 10.0.0.1, count: 2, degraded_if: {latency_over: soon}}",
        ])),
        [
            "t.yaml:3:18: host \"gw:80\" is neither an IP address nor a host name",
            "t.yaml:5:35: count must be between 1 and 100, got 0",
            "t.yaml:7:35: count must be between 1 and 100, got 101",
            "t.yaml:7:46: size must be at most 65507 bytes (an IP packet's limit), got 70000",
            "t.yaml:9:63: loss_over must be at least 0 and below 1, got 1.5",
            "t.yaml:11:42: loss_over needs a count above 1: with one echo, a lost echo fails the run",
            "t.yaml:13:28: unknown field \"timeout\" in icmp; expected one of \"host\", \"count\", \"size\", \"degraded_if\"",
            "t.yaml:15:66: invalid duration \"soon\" for \"latency_over\": expected number at 0",
        ]
    );
    assert_eq!(
        errors_of(&doc(&[
            "targets:",
            "  - id: a",
            "    udp: {address: \"127.0.0.1:514\"}",
            "  - id: b",
            "    udp: {address: \"127.0.0.1:514\", send: x, expect: y, expect_regex: z}",
            "  - id: c",
            "    udp: {address: \"syslog\", send: x}",
            "  - id: d",
            "    udp: {address: \"127.0.0.1:514\", send: x, expect_regex: \"(\"}",
            "  - id: e",
            "    udp: {address: \"127.0.0.1:514\", send: x}",
            "    icmp: {host: 127.0.0.1}",
        ])),
        [
            "t.yaml:3:10: missing field \"send\" in udp",
            "t.yaml:5:57: \"expect\" and \"expect_regex\" are mutually exclusive: keep only one",
            "t.yaml:7:20: address \"syslog\" has no port; expected HOST:PORT or [IPV6]:PORT",
            "t.yaml:9:60: invalid regex \"(\" for \"expect_regex\": unclosed group",
            "t.yaml:12:5: target \"e\" has more than one probe: keep only one",
        ]
    );
}

#[test]
fn the_cluster_section_takes_topology_etcd_and_gives_targets_its_replication() {
    let config = parse_ok(
        "topology:\n  etcd: {endpoints: [\"http://127.0.0.1:2379\"]}\n\
         cluster:\n  member: edge-1\n  lease_ttl: 3s\n  replicas: 3\n  quorum: 2\n\
         targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n\
         \x20 - id: b\n    tcp: {address: \"127.0.0.1:2\"}\n    quorum: 3\n\
         \x20 - id: c\n    tcp: {address: \"127.0.0.1:3\"}\n    replicas: 1\n    quorum: 1\n",
    );
    let cluster = config.cluster.as_ref().expect("a cluster");
    assert_eq!(cluster.etcd.endpoints, ["http://127.0.0.1:2379"]);
    assert_eq!(cluster.prefix, probe_config::DEFAULT_CLUSTER_PREFIX);
    assert_eq!(cluster.member.as_ref().map(|m| m.as_str()), Some("edge-1"));
    assert_eq!(cluster.lease_ttl, std::time::Duration::from_secs(3));
    assert_eq!(
        (cluster.replication.replicas(), cluster.replication.quorum()),
        (3, 2)
    );
    // Unset: the cluster's; set, over the cluster's.
    assert_eq!(target(&config, "a").replication, None);
    let b = target(&config, "b").replication.expect("set");
    assert_eq!((b.replicas(), b.quorum()), (3, 3));
    let c = target(&config, "c").replication.expect("set");
    assert_eq!((c.replicas(), c.quorum()), (1, 1));
}

#[test]
fn cluster_mistakes_are_located() {
    assert_eq!(
        errors_of("cluster:\n  member: a\ntargets: []\n"),
        ["t.yaml:1:1: the cluster needs etcd: give cluster an etcd block, or set topology.etcd"]
    );
    assert_eq!(
        errors_of(
            "cluster:\n  etcd: {endpoints: [\"127.0.0.1:2379\"]}\n  member: Edge_1\n  lease_ttl: 1s\n  replicas: 2\n  quorum: 3\n  prefix: /no-slash\n"
        ),
        [
            "t.yaml:3:11: invalid member name \"Edge_1\": target id \"Edge_1\" has character 'E'; allowed are a-z, 0-9, '.', '_' and '-'; name this member with --member NAME instead",
            "t.yaml:4:3: lease_ttl must be at least 2s: etcd counts leases in whole seconds",
            "t.yaml:6:11: quorum 3 is more than the 2 replicas that vote",
            "t.yaml:7:11: prefix must end in / and name a folder, such as /probe-engine/cluster/",
        ]
    );
    assert_eq!(
        errors_of("targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n    replicas: 0\n"),
        ["t.yaml:4:15: replicas must be at least 1"]
    );
    assert_eq!(
        errors_of("targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n    replicas: 2\n"),
        ["t.yaml:4:15: replicas and quorum apply in a cluster: add a cluster section"]
    );
    assert_eq!(
        errors_of(
            "cluster:\n  etcd: {endpoints: [\"127.0.0.1:2379\"]}\n  quorum: 2\n  replicas: 2\ntargets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n    replicas: 1\n"
        ),
        ["t.yaml:8:15: quorum 2 is more than the 1 replicas that vote"]
    );
}

#[test]
fn the_alerts_section_and_a_targets_rule_over_its_defaults() {
    let config = config::parse_with_env(
        Path::new("t.yaml"),
        "alerts:\n  alertmanager: {urls: [\"http://127.0.0.1:9093\"], basic_auth: {username: pe, password: \"${AM}\"}}\n  webhooks:\n    - {name: ops, url: \"http://127.0.0.1:8099/hook\", headers: {Authorization: \"Bearer ${TOKEN}\"}, timeout: 2s}\n  defaults: {on: [DOWN], for: 10s, severity: page, labels: {team: core}}\n\
         targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n\
         \x20 - id: b\n    tcp: {address: \"127.0.0.1:2\"}\n    alert: {on: [DOWN, DEGRADED], labels: {team: db}, annotations: {runbook: \"https://wiki/db\"}}\n\
         \x20 - id: c\n    tcp: {address: \"127.0.0.1:3\"}\n    alert: false\n",
        &|name| match name {
            "AM" => Some("am-Secret".to_owned()),
            "TOKEN" => Some("hook-Secret".to_owned()),
            _ => None,
        },
    )
    .unwrap();
    let alerts = config.alerts.as_ref().expect("alerts");
    let am = alerts.alertmanager.as_ref().unwrap();
    assert_eq!(am.resend, std::time::Duration::from_secs(60));
    assert_eq!(am.basic_auth.as_ref().unwrap().password, "am-Secret");
    assert!(!format!("{am:?}").contains("am-Secret"));
    assert!(!format!("{:?}", alerts.webhooks).contains("hook-Secret"));
    assert_eq!(
        alerts.webhooks[0].timeout,
        std::time::Duration::from_secs(2)
    );
    let rule = |id: &str| config.alert_rules[&probe::TargetId::new(id).unwrap()].clone();
    let a = rule("a").unwrap();
    assert_eq!(a.hold, std::time::Duration::from_secs(10));
    assert_eq!(a.labels["team"], "core");
    let b = rule("b").unwrap();
    assert_eq!(b.on.len(), 2);
    assert_eq!(
        (b.labels["team"].as_str(), b.severity.as_str()),
        ("db", "page")
    );
    assert_eq!(b.hold, std::time::Duration::from_secs(10));
    assert_eq!(b.annotations["runbook"], "https://wiki/db");
    assert_eq!(rule("c"), None);
}

#[test]
fn alert_mistakes_are_located() {
    assert_eq!(
        errors_of(
            "alerts:\n  alertmanager: {urls: [\"ftp://x\"], resend: 0s}\n  webhooks:\n    - {name: ops, url: \"http://127.0.0.1:1/\"}\n    - {name: ops, url: \"not a url\"}\n  defaults: {on: [DOWNN], for: soon, labels: {\"bad-name\": x}}\n"
        ),
        [
            "t.yaml:2:25: URL scheme \"ftp\" is not supported; expected http or https",
            "t.yaml:2:45: resend must be greater than zero",
            "t.yaml:5:14: webhook name \"ops\" is used twice",
            "t.yaml:5:24: invalid URL: relative URL without a base",
            "t.yaml:6:19: unknown state \"DOWNN\" for \"on\", did you mean \"DOWN\"?",
            "t.yaml:6:32: invalid duration \"soon\" for \"for\": expected number at 0",
            "t.yaml:6:47: label name \"bad-name\" must match [a-zA-Z_][a-zA-Z0-9_]*",
        ]
    );
    assert_eq!(
        errors_of("targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n    alert: false\n"),
        ["t.yaml:4:5: alert needs an alerts section to send to"]
    ); // No alert is raised on MAINTENANCE (it silences) nor PROBING (no verdict); a webhook
    // cannot take Alertmanager's name; the outbox holds one at least; a CA file must be readable.
    // A group alerts on its verdict, as a target does: the score threshold of old is refused.
    let section = "alerts:\n  alertmanager: {urls: [\"https://127.0.0.1:9093\"], tls: {ca_file: missing.pem}}\n  webhooks:\n    - {name: alertmanager, url: \"http://127.0.0.1:1/\"}\n  defaults: {on: [MAINTENANCE, PROBING]}\n  outbox_limit: 0\n";
    let errors = errors_of(&format!(
        "{section}targets:\n  - id: a\n    tcp: {{address: \"127.0.0.1:1\"}}\n  - id: g\n    kind: group\n    depends_on: [{{target: a}}]\n    alert: {{score_under: 0.5}}\n"
    ));
    let expected = [
        "t.yaml:2:67: cannot read CA file missing.pem",
        "t.yaml:4:14: \"alertmanager\" names Alertmanager among the receivers; give the webhook another name",
        "t.yaml:5:19: unknown state \"MAINTENANCE\" for \"on\"; expected one of DOWN, DEGRADED",
        "t.yaml:5:32: unknown state \"PROBING\" for \"on\"",
        "t.yaml:6:17: outbox_limit must be at least 1",
        "t.yaml:13:13: unknown field \"score_under\"",
    ];
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (error, start) in errors.iter().zip(expected) {
        assert!(
            error.starts_with(start),
            "{error} does not start with {start}"
        );
    }
}

#[test]
fn a_group_alerts_on_its_verdict_and_an_etcd_entry_carries_its_alert() {
    let config = config::parse(
        Path::new("t.yaml"),
        "alerts:\n  webhooks: [{name: ops, url: \"http://127.0.0.1:1/\"}]\n  defaults: {for: 5s}\n  outbox_limit: 7\n\
         targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n\
         \x20 - id: g\n    kind: group\n    depends_on: [{target: a}]\n    alert: {on: [DEGRADED]}\n",
    )
    .unwrap();
    assert_eq!(config.alerts.as_ref().unwrap().outbox_limit, 7);
    let g = config.alert_rules[&probe::TargetId::new("g").unwrap()]
        .clone()
        .unwrap();
    assert_eq!(
        (g.on, g.hold),
        (
            vec![probe::health::HealthState::Degraded],
            std::time::Duration::from_secs(5)
        )
    );
    let dir = Path::new(".");
    let entry = config::parse_declared(
        "db",
        "k",
        br#"{"id": "db", "tcp": {"address": "127.0.0.1:5432"}, "alert": {"on": ["DEGRADED"], "for": "1m"}}"#,
        dir,
    )
    .unwrap();
    let rule = entry.alert.over(&config::AlertRule::default()).unwrap();
    assert_eq!(rule.on, [probe::health::HealthState::Degraded]);
    assert_eq!(rule.hold, std::time::Duration::from_secs(60));
    let off = config::parse_declared(
        "db",
        "k",
        br#"{"id": "db", "tcp": {"address": "127.0.0.1:5432"}, "alert": false}"#,
        dir,
    )
    .unwrap();
    assert_eq!(off.alert.over(&config::AlertRule::default()), None);
    let error = config::parse_declared(
        "db",
        "k",
        br#"{"id": "db", "tcp": {"address": "127.0.0.1:5432"}, "state": {"up_from": 0.5}}"#,
        dir,
    )
    .unwrap_err();
    assert!(error.contains("state is for groups"), "{error}");
    // An etcd group's rule goes with it.
    let group = config::parse_declared(
        "g",
        "k",
        br#"{"id": "g", "kind": "group", "depends_on": [{"target": "db"}], "state": {"up_from": 0.9}}"#,
        dir,
    )
    .unwrap();
    let probe::topology::Declaration::Group { rule, .. } = &group.declaration else {
        panic!("a group: {:?}", group.declaration);
    };
    assert_eq!(rule.map(|r| r.up_from()), Some(0.9));
}

#[test]
fn a_groups_state_rule_is_read_and_every_bad_field_is_located() {
    let config = parse(
        "targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n\
         \x20 - id: g\n    kind: group\n    depends_on: [{target: a}]\n\
         \x20   state: {up_from: 0.9, degraded_from: 0.6, rise: 1, fall: 4, flap: false}\n\
         \x20 - id: plain\n    kind: group\n    depends_on: [{target: a}]\n",
    )
    .unwrap();
    let n = |n| std::num::NonZeroU32::new(n).unwrap();
    let want = probe::graph::GroupRule::try_new(
        0.9,
        0.6,
        probe::health::Thresholds::new(n(1), n(4)),
        None,
    )
    .unwrap();
    let g = probe::TargetId::new("g").unwrap();
    assert_eq!(config.topology.groups.get(&g), Some(&want));
    // A group without a `state` block has the default rule: no entry.
    assert_eq!(config.topology.groups.len(), 1);

    let errors = errors_of(
        "targets:\n  - id: a\n    tcp: {address: \"127.0.0.1:1\"}\n    state: {up_from: 0.5}\n\
         \x20 - id: g\n    kind: group\n    depends_on: [{target: a}]\n\
         \x20   state: {up_from: 1.5, rise: 0}\n\
         \x20 - id: h\n    kind: group\n    depends_on: [{target: a}]\n\
         \x20   state: {up_from: 0.8, degraded_from: 0.9}\n\
         \x20 - id: i\n    kind: group\n    depends_on: [{target: a}]\n\
         \x20   state: {up_form: 0.8}\n",
    );
    assert_eq!(
        errors,
        [
            "t.yaml:4:5: target \"a\": state is for groups; a target's verdict comes from its \
             own results (rise, fall)",
            "t.yaml:8:22: up_from must be a score in [0, 1], not 1.5",
            "t.yaml:8:33: rise must be at least 1",
            "t.yaml:12:42: degraded_from 0.9 is outside [0, up_from 0.8]",
            "t.yaml:16:13: unknown field \"up_form\" in state, did you mean \"up_from\"?",
        ]
    );
}

#[test]
fn the_history_section_and_the_sla_window() {
    let config = parse("targets: []\n").unwrap();
    assert_eq!(config.history, config::HistorySection::default());
    assert_eq!(
        config.history.store,
        Some(config::HistoryStore::Sqlite("history.db".into()))
    );
    assert_eq!(config.sla_window, None);
    let config = parse(
        "history:\n  postgres: { url: \"postgres://pe:pw@db/history\" }\n  retention: { transitions: 30d, rollups: 90d }\n  max_size: 2GiB\nscoring:\n  sla_window: 30d\ntargets: []\n",
    )
    .unwrap();
    let history = &config.history;
    assert!(
        matches!(&history.store, Some(config::HistoryStore::Postgres(url)) if url.starts_with("postgres://pe:"))
    );
    // The URL's password never shows.
    assert!(
        !format!("{history:?}").contains("postgres://"),
        "{history:?}"
    );
    assert_eq!(
        history.transitions,
        std::time::Duration::from_secs(30 * 86_400)
    );
    assert_eq!(history.rollups, std::time::Duration::from_secs(90 * 86_400));
    assert_eq!(history.max_bytes, 2 << 30);
    assert_eq!(
        config.sla_window,
        Some(std::time::Duration::from_secs(30 * 86_400))
    );
    assert_eq!(
        parse("history: false\ntargets: []\n")
            .unwrap()
            .history
            .store,
        None
    );
    assert_eq!(
        errors_of(
            "history:\n  sqlite: { path: a.db }\n  postgres: { url: \"mysql://x\" }\n  retention: { transitions: 1h, rollups: soon }\n  max_size: lots\n  keep: forever\n"
        ),
        [
            "t.yaml:6:3: unknown field \"keep\" in history; expected one of \"sqlite\", \"postgres\", \"retention\", \"max_size\""
        ]
    );
    assert_eq!(
        errors_of(
            "history:\n  sqlite: { path: a.db }\n  postgres: { url: \"mysql://x\" }\n  retention: { transitions: 1h, rollups: soon }\n  max_size: lots\n"
        ),
        [
            "t.yaml:3:13: history takes sqlite or postgres, not both",
            "t.yaml:4:16: transitions must be kept at least 1d",
            "t.yaml:4:42: invalid duration \"soon\" for \"rollups\": expected number at 0",
            "t.yaml:5:13: max_size \"lots\" is no size: expected bytes or a number with KiB, MiB, GiB, TiB (or KB, MB, GB, TB)",
        ]
    );
    assert_eq!(
        errors_of("history:\n  postgres: { url: \"mysql://x\" }\nscoring:\n  sla_window: 5m\n"),
        [
            "t.yaml:2:20: url must be a postgres:// or postgresql:// URL",
            "t.yaml:4:3: sla_window must be at least 1h: an SLA is a long window",
        ]
    );
}

#[test]
fn http_conditions_take_ranges_patterns_latency_limits_and_json_tests() {
    let text = doc(&[
        "targets:",
        "  - id: api",
        "    http:",
        "      url: http://127.0.0.1:8080/health",
        "      expect:",
        "        status: [\"401-499\", 2xx]",
        "        body_matches: [\"^\\\\{\", \"UP\"]",
        "        latency_under: 300ms",
        "        json:",
        "          \"$.status\": UP",
        "          \"$.mode\": { ne: readonly, not_matches: \"^ro\" }",
        "          \"$.id\": { any: [1, \"2\"], none: [3] }",
        "          \"$.name\": { matches: \"^john\" }",
        "          \"$.queue\": { gt: 0, lt: 100.5 }",
        "          \"$.items\": { len: { ge: 1, le: 5 } }",
        "          \"$.tags\": { len: 2 }",
        "          \"$.errors\": { exists: false }",
        "      degraded_if:",
        "        json: { \"$.queue\": { ge: 50 } }",
    ]);
    let config = parse_ok(&text);
    let spec = http(&config, 0);
    assert_eq!(
        spec.expect.status,
        StatusSet::new(vec![
            StatusPattern::Range(401, 499),
            StatusPattern::Class(2)
        ])
        .unwrap()
    );
    let regexes: Vec<&str> = spec
        .patterns
        .body_matches
        .iter()
        .map(|p| p.as_str())
        .collect();
    assert_eq!(regexes, ["^\\{", "UP"]);
    assert_eq!(spec.expect.latency_under, Some(Duration::from_millis(300)));
    let tests: Vec<(String, Vec<String>)> = spec
        .expect
        .json
        .iter()
        .map(|m| {
            (
                m.path.to_string(),
                m.tests.iter().map(ToString::to_string).collect(),
            )
        })
        .collect();
    let expected: Vec<(String, Vec<String>)> = [
        ("$.status", vec![r#""UP""#]),
        ("$.mode", vec![r#"not "readonly""#, "not matching /^ro/"]),
        ("$.id", vec![r#"one of 1, "2""#, "none of 3"]),
        ("$.name", vec!["matching /^john/"]),
        ("$.queue", vec!["< 100.5", "> 0"]),
        ("$.items", vec!["length <= 5", "length >= 1"]),
        ("$.tags", vec!["length == 2"]),
        ("$.errors", vec!["absent"]),
    ]
    .into_iter()
    .map(|(p, t)| (p.to_owned(), t.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(tests, expected);
    assert_eq!(
        spec.degraded_if.json,
        vec![JsonMatch {
            path: "$.queue".parse().unwrap(),
            tests: vec![JsonTest::Number(Comparison::Ge, 50.0)],
        }]
    );
}

#[test]
fn invalid_http_conditions_are_reported_where_they_are() {
    let text = doc(&[
        "targets:",
        "  - id: api",
        "    http:",
        "      url: http://127.0.0.1:8080/health",
        "      expect:",
        "        status: [\"499-401\"]",
        "        body_matches: \"(\"",
        "        latency_under: soon",
        "        json:",
        "          \"$.a\": { gtt: 1 }",
        "          \"$.b\": { any: [] }",
        "          \"$.c\": { matches: \"[\" }",
        "          \"$.d\": { len: -1 }",
        "          \"$.e\": {}",
    ]);
    let errors = parse(&text).expect_err("invalid");
    let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
    let has = |prefix: &str| {
        assert!(
            lines.iter().any(|l| l.starts_with(prefix)),
            "no error starting {prefix:?} in:\n{errors}"
        );
    };
    has("t.yaml:6:18: invalid status \"499-401\"");
    has("t.yaml:7:23: invalid regex \"(\" for \"body_matches\"");
    has("t.yaml:8:24: invalid duration");
    has("t.yaml:10:20: unknown field \"gtt\" in expect, did you mean \"gt\"?");
    has("t.yaml:11:25: \"any\" needs at least one value");
    has("t.yaml:12:29: invalid regex \"[\" for \"matches\"");
    has("t.yaml:13:25: invalid value for \"http.expect.json.$.d.len\": a length is not negative");
    has("t.yaml:14:18: a JSON test needs at least one of eq, ne");
    assert_eq!(lines.len(), 8, "{errors}");
}

#[test]
fn conversations_patterns_and_record_rules_are_mapped_and_located() {
    let config = parse_ok(&doc(&[
        "targets:",
        "  - id: redis",
        "    tcp:",
        "      address: 127.0.0.1:6379",
        "      conversation:",
        "        - send: \"PING\\r\\n\"",
        "        - expect_line: \"^\\\\+PONG$\"",
        "        - reply: \"ACK $1\"",
        "  - id: web",
        "    http:",
        "      url: https://127.0.0.1:8443/",
        "      expect:",
        "        body_matches: ok",
        "        body_not_matches: [error, fatal]",
        "        header_matches: [{header: Content-Type, regex: json}]",
        "        header_not_matches: [{header: x-mode, regex: readonly, allow_missing: true}]",
        "        tls: true",
        "        http_version: [HTTP/1.1]",
        "  - id: ns",
        "    dns:",
        "      server: 127.0.0.1:53",
        "      name: a.test",
        "      type: any",
        "      recursion_desired: false",
        "      expect:",
        "        rcode: [NOERROR, nxdomain]",
        "        records: {answer: {none_match: \"10\\\\.9\"}, additional: {some_match: [glue]}}",
        "  - id: imaps",
        "    tls: {address: \"127.0.0.1:993\", conversation: [{expect_line: \"^\\\\* OK\"}]}",
        "  - id: smtp",
        "    tls: {address: \"127.0.0.1:25\", before_tls: [{expect_line: \"^220\"}, {send: \"STARTTLS\\r\\n\"}]}",
    ]));
    let ProbeSpec::Tls(smtp) = &config.topology.targets[4].probe else {
        panic!("not tls");
    };
    assert_eq!(smtp.before_tls.len(), 2);
    let ProbeSpec::Tls(imaps) = &config.topology.targets[3].probe else {
        panic!("not tls");
    };
    assert_eq!(imaps.conversation.len(), 1);
    let steps = tcp(&config, 0).conversation();
    assert_eq!(steps.len(), 3);
    assert!(matches!(&steps[2], probe::tier::tcp::Step::Reply(b) if b == b"ACK $1"));
    assert!(matches!(&steps[0], probe::tier::tcp::Step::Send(b) if b == b"PING\r\n"));
    assert!(
        matches!(&steps[1], probe::tier::tcp::Step::ExpectLine(re) if re.as_str() == "^\\+PONG$")
    );
    let patterns = &http(&config, 1).patterns;
    assert_eq!(patterns.body_matches.len(), 1);
    assert_eq!(patterns.body_not_matches.len(), 2);
    assert_eq!(patterns.header_matches[0].name.as_str(), "content-type");
    assert!(patterns.header_not_matches[0].allow_missing);
    assert_eq!(patterns.tls, Some(true));
    assert_eq!(patterns.versions.len(), 1);
    let ns = dns(&config, 2);
    assert_eq!(ns.record_type, DnsType::Any);
    assert!(!ns.recursion_desired);
    assert_eq!(ns.expect.rcodes, [Rcode::NOERROR, Rcode::NXDOMAIN]);
    assert_eq!(ns.expect.min_answers(), 0);
    assert_eq!(ns.expect.records.answer.none_match[0].as_str(), "10\\.9");
    assert_eq!(ns.expect.records.additional.some_match.len(), 1);

    let errors = parse(&doc(&[
        "targets:",
        "  - id: a",
        "    tcp:",
        "      address: 127.0.0.1:1",
        "      send: x",
        "      conversation: [{send: y}]",
        "  - id: b",
        "    tcp: {address: \"127.0.0.1:1\", conversation: [{send: y, expect_line: z}, {expect_line: \"(\"}]}",
        "  - id: c",
        "    http: {url: \"http://a/\", expect: {body_matches: [\"[\"], http_version: HTTP/2.0}}",
        "  - id: d",
        "    dns: {server: 127.0.0.1, name: a.test, expect: {rcode: [], records: {authority: {all_match: \"(\"}}}}",
        "  - id: e",
        "    tls: {address: \"127.0.0.1:1\", conversation: []}",
        "  - id: f",
        "    tls: {address: \"127.0.0.1:1\", starttls: smtp, before_tls: [{send: x}]}",
        "  - id: g",
        "    tcp: {address: \"127.0.0.1:1\", conversation: [{reply: x}]}",
    ]))
    .unwrap_err();
    let shown: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
    let want = [
        "t.yaml:6:7: \"conversation\" replaces \"send\", \"expect\" and \"expect_regex\"",
        "t.yaml:8:50: a conversation step has exactly one of \"expect_line\", \"send\" and \"reply\"",
        "t.yaml:8:91: invalid regex \"(\" for \"expect_line\"",
        "t.yaml:10:54: invalid regex \"[\" for \"body_matches\"",
        "t.yaml:10:74: unknown HTTP version \"HTTP/2.0\"",
        "t.yaml:12:60: rcode list is empty",
        "t.yaml:12:97: invalid regex \"(\" for \"records.authority.all_match\"",
        "t.yaml:14:49: conversation is empty",
        "t.yaml:16:51: \"before_tls\" and \"starttls\" are mutually exclusive",
        "t.yaml:18:51: \"reply\" fills in groups of a matched line",
    ];
    assert_eq!(shown.len(), want.len(), "{shown:#?}");
    for (got, want) in shown.iter().zip(want) {
        assert!(got.starts_with(want), "{got} does not start with {want}");
    }
}

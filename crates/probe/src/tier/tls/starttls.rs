//! The plain-text start of the protocols that upgrade to TLS on request: just enough of each to
//! ask for the upgrade and read the server's yes or no.
//!
//! Replies are read a byte at a time: the exchange is a few short lines, and reading no further
//! than each line's end leaves nothing of the TLS handshake behind in a buffer.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::spec::StartTls;
use crate::outcome::{Failure, FailureReason};

/// The longest reply line read.
const MAX_LINE: usize = 4096;
/// The most lines of one reply (an `EHLO` answer lists the server's extensions).
const MAX_LINES: usize = 64;

/// Asks the server on `stream` to start TLS, as `protocol` does; `Ok` once it agreed.
pub(crate) async fn upgrade(
    stream: &mut TcpStream,
    protocol: StartTls,
    deadline: Instant,
) -> Result<(), Failure> {
    let mut talk = Talk {
        stream,
        deadline,
        protocol,
    };
    match protocol {
        StartTls::Smtp => {
            talk.expect_reply("220", "greeting").await?;
            talk.send(b"EHLO probe-engine\r\n").await?;
            talk.expect_reply("250", "EHLO").await?;
            talk.send(b"STARTTLS\r\n").await?;
            talk.expect_reply("220", "STARTTLS").await
        }
        StartTls::Imap => {
            talk.expect_line("* OK", "greeting").await?;
            talk.send(b"p1 STARTTLS\r\n").await?;
            // Untagged lines may come before the tagged answer.
            for _ in 0..MAX_LINES {
                let line = talk.line().await?;
                if let Some(answer) = line.strip_prefix("p1 ") {
                    return if answer.starts_with("OK") {
                        Ok(())
                    } else {
                        Err(talk.refused("STARTTLS", &line))
                    };
                }
            }
            Err(talk.refused("STARTTLS", "no tagged answer"))
        }
        StartTls::Pop3 => {
            talk.expect_line("+OK", "greeting").await?;
            talk.send(b"STLS\r\n").await?;
            talk.expect_line("+OK", "STLS").await
        }
        StartTls::Postgres => {
            // SSLRequest: length 8, then the request code 80877103.
            talk.send(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await?;
            match talk.byte().await? {
                b'S' => Ok(()),
                b'N' => Err(talk.refused("SSLRequest", "N (the server does not do TLS)")),
                other => Err(talk.refused("SSLRequest", &format!("byte {other:#04x}, not S or N"))),
            }
        }
    }
}

struct Talk<'a> {
    stream: &'a mut TcpStream,
    deadline: Instant,
    protocol: StartTls,
}

impl Talk<'_> {
    async fn send(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        match timeout_at(self.deadline, self.stream.write_all(bytes)).await {
            Err(_) => Err(self.timed_out()),
            Ok(Err(e)) => Err(Failure::io(&format!("{} send", self.protocol), &e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    async fn byte(&mut self) -> Result<u8, Failure> {
        match timeout_at(self.deadline, self.stream.read_u8()).await {
            Err(_) => Err(self.timed_out()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Failure::new(
                FailureReason::Reset,
                format_args!("{}: the server closed the connection", self.protocol),
            )),
            Ok(Err(e)) => Err(Failure::io(&format!("{} read", self.protocol), &e)),
            Ok(Ok(b)) => Ok(b),
        }
    }

    /// One line, without its line end.
    async fn line(&mut self) -> Result<String, Failure> {
        let mut line = Vec::new();
        loop {
            match self.byte().await? {
                b'\n' => break,
                b => line.push(b),
            }
            if line.len() > MAX_LINE {
                return Err(Failure::new(
                    FailureReason::Body,
                    format_args!("{}: a reply line over {MAX_LINE} bytes", self.protocol),
                ));
            }
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    /// A line that must start with `prefix`.
    async fn expect_line(&mut self, prefix: &str, step: &str) -> Result<(), Failure> {
        let line = self.line().await?;
        if line.starts_with(prefix) {
            Ok(())
        } else {
            Err(self.refused(step, &line))
        }
    }

    /// An SMTP reply, possibly of several lines (`250-...` then `250 ...`), with code `code`.
    async fn expect_reply(&mut self, code: &str, step: &str) -> Result<(), Failure> {
        for _ in 0..MAX_LINES {
            let line = self.line().await?;
            if !line.starts_with(code) {
                return Err(self.refused(step, &line));
            }
            if line.as_bytes().get(code.len()) != Some(&b'-') {
                return Ok(());
            }
        }
        Err(self.refused(step, "a reply of too many lines"))
    }

    fn timed_out(&self) -> Failure {
        Failure::new(
            FailureReason::Timeout,
            format_args!("{} exchange before TLS timed out", self.protocol),
        )
    }

    /// The server said no (or something else than yes): no TLS to be had.
    fn refused(&self, step: &str, answer: &str) -> Failure {
        const SHOWN: usize = 120;
        let shown: String = answer.chars().take(SHOWN).collect();
        Failure::new(
            FailureReason::Tls,
            format_args!("{} {step}: the server answered {shown:?}", self.protocol),
        )
    }
}

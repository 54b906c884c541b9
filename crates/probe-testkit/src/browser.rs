//! A real headless Chromium (Debian's `chromium`), driven over WebDriver through ChromeDriver
//! (`chromium-driver`) with [`fantoccini`]: what the status page's tests load pages in, so that
//! what they check (text, scripts run or not, first paint, a screenshot) is what a browser does
//! with the page rather than what a parser makes of its HTML.
//!
//! Each [`Browser`] is a ChromeDriver of its own on a free loopback port with one session, a
//! fresh profile, and `HOME` and `TMPDIR` in a temporary directory, so that browsers side by side
//! share nothing and nothing lands in the real home (crash reports, caches). Dropping it ends the
//! session, kills whatever is left of ChromeDriver and Chromium (one process group) and removes
//! the directory.
//!
//! Tests point it at `127.0.0.1` only ([`Browser::goto`] refuses anything else): its flags turn
//! off the browser's own traffic (component updates, sync, background networking), and a test
//! must not reach the internet through the pages it loads either.

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::postgres::Deadline;

/// Debian's Chromium (a launcher script that execs `/usr/lib/chromium/chromium`).
const CHROMIUM: &str = "/usr/bin/chromium";
/// Chromium's flags: headless; no sandbox (the suite runs as root, where Chromium's sandbox
/// refuses to start) and no GPU (there is none); none of its own traffic (QUIC, first-run,
/// background networking, component updates, sync); `/tmp` rather than a container's small
/// `/dev/shm`; and one window size, so that screenshots compare.
const CHROMIUM_ARGS: [&str; 10] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
];
/// How long ChromeDriver may take to listen: seconds on a loaded CI machine, forever on a hung
/// one. (Chromium's own start is bounded by ChromeDriver, which fails the session.)
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a free port is picked again when another process took it before ChromeDriver
/// bound it.
const PORT_ATTEMPTS: usize = 5;
/// How long ending the session (ChromeDriver closing Chromium) may take on drop before both
/// are killed.
const QUIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`Browser::first_paint_ms`] waits for a page that has not painted yet.
const PAINT_TIMEOUT_MS: u64 = 5_000;
/// How many lines of ChromeDriver's log an error quotes.
const LOG_TAIL_LINES: usize = 40;
/// What ChromeDriver logs once it listens.
const LISTENING: &str = "ChromeDriver was started successfully";

/// The page's first-contentful-paint, else its first-paint, in milliseconds since navigation,
/// waiting (a `PerformanceObserver`, up to the timeout in the first argument) when the page has
/// not painted yet; `null` when it does not paint in time.
const PAINT_SCRIPT: &str = r"
const [timeoutMs, done] = arguments;
const paint = () => {
  const entries = performance.getEntriesByType('paint');
  const entry = entries.find((e) => e.name === 'first-contentful-paint')
    || entries.find((e) => e.name === 'first-paint');
  return entry ? entry.startTime : null;
};
const now = paint();
if (now !== null) {
  done(now);
} else {
  const observer = new PerformanceObserver(() => {
    const later = paint();
    if (later !== null) {
      observer.disconnect();
      done(later);
    }
  });
  observer.observe({ type: 'paint', buffered: true });
  setTimeout(() => { observer.disconnect(); done(paint()); }, timeoutMs);
}
";

/// A headless Chromium with one WebDriver session; ended, and everything it started killed,
/// when dropped (also when the test panics).
pub struct Browser {
    client: Client,
    /// The session to end on drop.
    session: Option<String>,
    javascript: bool,
    driver_addr: SocketAddr,
    /// Held for its drop only: after the session ended, before `dir` is removed (fields drop
    /// in this order).
    _driver: ProcessGroup,
    dir: tempfile::TempDir,
}

/// Why the browser did not start, or a command failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// This machine cannot run it: `/usr/bin/chromium` or `chromedriver` is missing
    /// (`scripts/setup` installs Debian's `chromium` and `chromium-driver`). A test says so with
    /// [`skipped_outside_ci`](crate::skipped_outside_ci).
    #[error("{0}")]
    Skip(String),
    /// ChromeDriver exited or never listened; the end of its log says why.
    #[error("ChromeDriver did not start: {0}")]
    Start(String),
    /// ChromeDriver did not start a Chromium session; the end of its log (with Chromium's
    /// output) says why.
    #[error("no Chromium session: {source}; ChromeDriver's log: {log}")]
    Session {
        /// What the WebDriver client saw.
        source: fantoccini::error::NewSessionError,
        /// The end of ChromeDriver's log.
        log: String,
    },
    /// A WebDriver command failed (a navigation, an element not found, a script's error).
    #[error("WebDriver command failed: {0}")]
    Command(#[from] fantoccini::error::CmdError),
    /// [`Browser::goto`] was asked for an address other than `127.0.0.1`.
    #[error("refusing to browse {0}: tests only browse http(s)://127.0.0.1")]
    NotLoopback(String),
    /// Setting up its directory, its port or writing a screenshot failed.
    #[error("browser fixture: {0}")]
    Io(#[from] io::Error),
}

impl Browser {
    /// Starts ChromeDriver on a free loopback port, waits until it listens and its `/status`
    /// says it is ready, then opens a session with Chromium: headless, a fresh profile, and
    /// JavaScript on or off (off: the content setting an administrator's policy would set, so
    /// no page script runs, inline or not).
    ///
    /// # Errors
    /// [`BrowserError::Skip`] without Chromium or ChromeDriver; otherwise what went wrong, with
    /// the end of ChromeDriver's log.
    pub async fn start(javascript: bool) -> Result<Self, BrowserError> {
        if !Path::new(CHROMIUM).is_file() {
            return Err(BrowserError::Skip(format!(
                "Chromium is not installed: no {CHROMIUM} (scripts/setup installs Debian's \
                 chromium)"
            )));
        }
        let chromedriver = super::which("chromedriver").ok_or_else(|| {
            BrowserError::Skip(
                "ChromeDriver is not installed: no chromedriver on PATH (scripts/setup installs \
                 Debian's chromium-driver)"
                    .into(),
            )
        })?;
        let dir = tempfile::tempdir()?;
        for sub in ["home", "tmp", "profile"] {
            std::fs::create_dir(dir.path().join(sub))?;
        }
        let (driver, driver_addr) = start_driver(&chromedriver, dir.path()).await?;

        let mut options = json!({
            "binary": CHROMIUM,
            "args": CHROMIUM_ARGS
                .iter()
                .map(|arg| (*arg).to_owned())
                .chain([format!("--user-data-dir={}", dir.path().join("profile").display())])
                .collect::<Vec<_>>(),
        });
        if !javascript {
            options["prefs"] = json!({ "profile.managed_default_content_settings.javascript": 2 });
        }
        let mut capabilities = Capabilities::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".into(), options);
        let client = match ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://{driver_addr}"))
            .await
        {
            Ok(client) => client,
            Err(source) => {
                return Err(BrowserError::Session {
                    source,
                    log: tail(&read_log(dir.path())),
                });
            }
        };
        let session = client.session_id().await?;
        Ok(Self {
            client,
            session,
            javascript,
            driver_addr,
            _driver: driver,
            dir,
        })
    }

    /// The WebDriver client, for what the helpers here do not cover. Point it at `127.0.0.1`
    /// only, as [`goto`](Self::goto) does.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether page scripts run.
    pub fn javascript(&self) -> bool {
        self.javascript
    }

    /// Its directory (the profile, `HOME`, `TMPDIR`, ChromeDriver's log); removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// ChromeDriver's log so far, with Chromium's output: where a page's console errors and a
    /// crashed renderer show.
    pub fn log(&self) -> String {
        read_log(self.dir.path())
    }

    /// Loads `url` and waits until it has loaded (its `load` event).
    ///
    /// # Errors
    /// [`BrowserError::NotLoopback`] for anything but `http(s)://127.0.0.1[:port]...`, else
    /// when the navigation fails.
    pub async fn goto(&self, url: &str) -> Result<(), BrowserError> {
        if !is_loopback(url) {
            return Err(BrowserError::NotLoopback(url.to_owned()));
        }
        self.client.goto(url).await?;
        Ok(())
    }

    /// The rendered text of the first element matching the CSS `selector` (what a reader sees:
    /// hidden elements have none).
    ///
    /// # Errors
    /// When no element matches.
    pub async fn text(&self, selector: &str) -> Result<String, BrowserError> {
        Ok(self
            .client
            .find(Locator::Css(selector))
            .await?
            .text()
            .await?)
    }

    /// Writes a PNG of what the window shows (1280 px wide) to `path`, creating its parent
    /// directories.
    ///
    /// # Errors
    /// When the browser cannot take it or the file cannot be written.
    pub async fn screenshot(&self, path: impl AsRef<Path>) -> Result<(), BrowserError> {
        let path = path.as_ref();
        let png = self.client.screenshot().await?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        tokio::fs::write(path, png).await?;
        Ok(())
    }

    /// The current page's first-contentful-paint (else its first-paint) in milliseconds since
    /// navigation, as `performance.getEntriesByType('paint')` has it, waiting up to 5 s for a
    /// page that has not painted yet. `None` when it did not paint in that time, and always
    /// with JavaScript off: the page is then seen as a reader without scripts sees it, and the
    /// fixture runs none in it either.
    ///
    /// # Errors
    /// When the script fails.
    pub async fn first_paint_ms(&self) -> Result<Option<f64>, BrowserError> {
        if !self.javascript {
            return Ok(None);
        }
        let value = self
            .client
            .execute_async(PAINT_SCRIPT, vec![json!(PAINT_TIMEOUT_MS)])
            .await?;
        Ok(value.as_f64())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session has ChromeDriver close Chromium and reap it, so that no process is
        // left for an init that may not reap; the client's own close is asynchronous and would
        // race the kill below. Whatever remains is killed with ChromeDriver's process group.
        if let Some(session) = self.session.take() {
            end_session(self.driver_addr, &session);
        }
    }
}

/// A child leading a process group of its own (ChromeDriver, and the Chromium it starts, which
/// stays in that group): the whole group is killed on drop.
struct ProcessGroup(Child);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // Before reaping the leader, so that its pid (the group's id) cannot be reused yet.
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts ChromeDriver on a free port (another when the port got taken before it bound it) and
/// waits until it is ready.
async fn start_driver(
    chromedriver: &Path,
    dir: &Path,
) -> Result<(ProcessGroup, SocketAddr), BrowserError> {
    for _ in 0..PORT_ATTEMPTS {
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let log = File::create(dir.join("chromedriver.log"))?;
        let home = dir.join("home");
        let child = Command::new(chromedriver)
            .arg(format!("--port={}", addr.port()))
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("TMPDIR", dir.join("tmp"))
            .current_dir(dir)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut driver = ProcessGroup(child);
        if wait_ready(&mut driver, addr, dir).await? {
            return Ok((driver, addr));
        }
    }
    Err(BrowserError::Start(format!(
        "another process took each of {PORT_ATTEMPTS} free ports before ChromeDriver bound it: {}",
        tail(&read_log(dir))
    )))
}

/// Polls until ChromeDriver logged that it listens and its `/status` says `ready` (both: a
/// `/status` alone could come from whoever took the port first); `false` when it exited
/// because the port was taken.
async fn wait_ready(
    driver: &mut ProcessGroup,
    addr: SocketAddr,
    dir: &Path,
) -> Result<bool, BrowserError> {
    let deadline = Deadline::after(START_TIMEOUT);
    loop {
        if read_log(dir).contains(LISTENING) && status_ready(addr).await {
            return Ok(true);
        }
        if let Some(status) = driver.0.try_wait()? {
            let log = read_log(dir);
            if log.contains("port not available") || log.contains("Address already in use") {
                return Ok(false);
            }
            return Err(BrowserError::Start(format!(
                "chromedriver exited with {status}: {}",
                tail(&log)
            )));
        }
        if deadline.passed() {
            return Err(BrowserError::Start(format!(
                "not ready on {addr} after {START_TIMEOUT:?}: {}",
                tail(&read_log(dir))
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `GET /status` answers `{"value": {"ready": true}}`; a hung answer counts as not
/// ready after a second.
async fn status_ready(addr: SocketAddr) -> bool {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /status HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        read_body(&mut stream).await
    };
    let Ok(Ok(body)) = tokio::time::timeout(Duration::from_secs(1), exchange).await else {
        return false;
    };
    serde_json::from_slice::<Value>(&body)
        .is_ok_and(|status| status["value"]["ready"] == json!(true))
}

/// The body of the HTTP/1.1 answer on `stream`, by its `Content-Length`: ChromeDriver keeps the
/// connection open after answering (even when asked to close it) and rejects HTTP/1.0, so the
/// end of the stream never marks the end of the body.
async fn read_body(stream: &mut tokio::net::TcpStream) -> io::Result<Vec<u8>> {
    let mut response = Vec::new();
    let mut buf = [0; 4096];
    loop {
        if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .ok_or_else(|| io::Error::other("an answer without Content-Length"))?;
            let body_start = end + 4;
            if response.len() >= body_start + length {
                return Ok(response[body_start..body_start + length].to_vec());
            }
        }
        match stream.read(&mut buf).await? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => response.extend_from_slice(&buf[..n]),
        }
    }
}

/// `DELETE /session/<id>`, waiting (up to [`QUIT_TIMEOUT`]) for ChromeDriver's answer, which
/// comes once Chromium has exited. Blocking, because `Drop` cannot await; failures are ignored
/// (the process group is killed next anyway).
fn end_session(addr: SocketAddr, session: &str) {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return;
    };
    if stream.set_read_timeout(Some(QUIT_TIMEOUT)).is_err() {
        return;
    }
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        // The first bytes of the answer are the signal; what it says does not matter.
        let _ = stream.read(&mut [0; 64]);
    }
}

/// Whether `url` is `http(s)://127.0.0.1`, with or without a port, and nothing else as its
/// host (`http://127.0.0.1:80@example.com/` has `example.com` as its host).
fn is_loopback(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://127.0.0.1")
        .or_else(|| url.strip_prefix("https://127.0.0.1"))
    else {
        return false;
    };
    let rest = rest.strip_prefix(':').map_or(rest, |port| {
        port.trim_start_matches(|c: char| c.is_ascii_digit())
    });
    rest.is_empty() || rest.starts_with(['/', '?', '#'])
}

/// ChromeDriver's log so far (with Chromium's output).
fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("chromedriver.log")).unwrap_or_default()
}

/// The last [`LOG_TAIL_LINES`] lines of `log`, on lines of their own.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    format!("\n{}", lines[start..].join("\n"))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::{Browser, BrowserError, Deadline, is_loopback};

    /// Where test artifacts go: `test-artifacts/` in `CARGO_TARGET_DIR` (relative to the workspace,
    /// where cargo is run from), else in the workspace's `target/`.
    fn artifacts_dir() -> PathBuf {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| workspace.join("target"), |dir| workspace.join(dir));
        target.join("test-artifacts")
    }

    /// A page whose script changes `#y`: its text tells whether scripts ran.
    const PAGE: &str = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>fixture</title>\
        </head><body>\n<p id=\"x\">hello</p>\n<p id=\"y\">no script ran</p>\n\
        <script>document.getElementById('y').textContent = 'the script ran';</script>\n\
        </body></html>\n";

    /// Serves [`PAGE`] at `/` (404 elsewhere) on a loopback port, one HTTP/1.1 request per
    /// connection, until the test ends.
    async fn serve_page() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let (status, body) = if request.starts_with(b"GET / ") {
                        ("200 OK", PAGE)
                    } else {
                        ("404 Not Found", "not found\n")
                    };
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        addr
    }

    /// A started browser, or `None` (said as `SKIPPED`, or failed under `CI`) when this machine
    /// has no Chromium or ChromeDriver.
    async fn browser_or_skip(javascript: bool) -> Option<Browser> {
        match Browser::start(javascript).await {
            Ok(browser) => Some(browser),
            Err(BrowserError::Skip(why)) => {
                crate::skipped_outside_ci(&format!("the browser fixture: {why}"));
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// The processes (not yet exited) whose command line names `dir`.
    fn processes_naming(dir: &Path) -> Vec<String> {
        let needle = dir.to_string_lossy().into_owned();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
            .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
            .filter(|cmdline| cmdline.contains(&needle))
            .collect()
    }

    #[tokio::test]
    async fn with_javascript_the_script_runs_the_page_paints_and_nothing_outlives_the_browser() {
        let Some(browser) = browser_or_skip(true).await else {
            return;
        };
        let page = serve_page().await;
        browser.goto(&format!("http://{page}/")).await.unwrap();
        assert_eq!(browser.text("#x").await.unwrap(), "hello");
        assert_eq!(browser.text("#y").await.unwrap(), "the script ran");

        let paint = browser.first_paint_ms().await.unwrap();
        assert!(
            paint.is_some_and(|ms| ms.is_finite() && ms > 0.0),
            "{paint:?}"
        );

        let png = artifacts_dir().join("browser-fixture.png");
        let _ = std::fs::remove_file(&png);
        browser.screenshot(&png).await.unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{}", png.display());

        let dir = browser.dir().to_owned();
        let driver = browser.driver_addr;
        assert!(
            !processes_naming(&dir).is_empty(),
            "Chromium runs with its profile in {dir:?}"
        );
        drop(browser);
        // Killed processes may take a moment to be gone from /proc.
        let deadline = Deadline::after(Duration::from_secs(5));
        while !processes_naming(&dir).is_empty() && !deadline.passed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(processes_naming(&dir), Vec::<String>::new());
        assert!(
            std::net::TcpStream::connect(driver).is_err(),
            "ChromeDriver still listens"
        );
        assert!(!dir.exists(), "{} outlived the browser", dir.display());
    }

    #[tokio::test]
    async fn without_javascript_no_script_runs_and_no_paint_is_measured() {
        let Some(browser) = browser_or_skip(false).await else {
            return;
        };
        let page = serve_page().await;
        browser.goto(&format!("http://{page}/")).await.unwrap();
        assert_eq!(browser.text("#x").await.unwrap(), "hello");
        assert_eq!(browser.text("#y").await.unwrap(), "no script ran");
        assert_eq!(browser.first_paint_ms().await.unwrap(), None);

        let refused = browser.goto("http://example.com/").await.unwrap_err();
        assert!(matches!(refused, BrowserError::NotLoopback(_)), "{refused}");
    }

    #[test]
    fn only_loopback_urls_are_browsed() {
        for url in [
            "http://127.0.0.1",
            "http://127.0.0.1/",
            "http://127.0.0.1:8080/status?x=1",
            "https://127.0.0.1:8443#top",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "http://example.com/",
            "http://127.0.0.1.example.com/",
            "http://127.0.0.1:80@example.com/",
            "http://127.0.0.1@example.com/",
            "http://localhost:8080/",
            "file:///etc/passwd",
            "data:text/html,hi",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }
}

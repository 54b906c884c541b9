//! A real PostgreSQL server (Debian's `postgresql`) on a free loopback port, its whole cluster in
//! a temporary directory: what the history store's tests write to and read back from, with the
//! server's own SQL, locking and errors rather than a mock's idea of them.
//!
//! Each [`Postgres`] is a cluster of its own (`initdb` into a fresh directory, then `postgres`),
//! so tests run side by side without sharing tables, and nothing outlives the value: dropping it
//! shuts the server down and removes the directory. Durability is off (`fsync`, full-page writes
//! and synchronous commit), which a throw-away cluster has no use for and which makes `initdb`
//! and every commit fast.
//!
//! PostgreSQL refuses to run as root, and the suite runs as root: then the server runs as the
//! unprivileged `postgres` user that Debian's package creates, owning the directory.

use std::fs::File;
use std::io;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, Uid, User};

/// The superuser `initdb` creates (trusted, no password) and the database made for the tests.
const USER: &str = "probe";
/// The database [`Postgres::url`] names.
const DATABASE: &str = "probe";
/// How long `initdb`, the database's creation and the server's start may each take: a loaded CI
/// machine takes seconds, a hung one forever.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an immediate shutdown may take before the server is killed outright.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a free port is picked again when another process took it between our probe and the
/// server's bind.
const PORT_ATTEMPTS: usize = 5;
/// How many lines of a log an error quotes: the end is where a server says why it stopped.
const LOG_TAIL_LINES: usize = 30;
/// What the server logs once it accepts connections.
const READY: &str = "ready to accept connections";

/// A running PostgreSQL server with a database [`url`](Self::url) points at; shut down, and its
/// directory removed, when dropped (also when the test panics).
pub struct Postgres {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// Why PostgreSQL did not start.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    /// This machine cannot run it: the server binaries, or the `postgres` user it must run as
    /// under root, are missing (`scripts/setup` installs Debian's `postgresql`, which brings
    /// both). A test says so with
    /// [`skipped_outside_ci`](crate::skipped_outside_ci).
    #[error("{0}")]
    Skip(String),
    /// `initdb`, the database's creation or the server failed or never became ready; the end of
    /// its log says why.
    #[error("PostgreSQL did not start: {0}")]
    Start(String),
    /// Setting up its directory or port failed.
    #[error("setting up PostgreSQL: {0}")]
    Io(#[from] io::Error),
}

impl Postgres {
    /// Creates a cluster in a temporary directory with a trusted superuser and a database,
    /// starts the server on `127.0.0.1` (a free port; Unix sockets in the directory, not in
    /// `/var/run/postgresql`) and waits until it accepts connections: it logged so and a TCP
    /// connection to its port succeeds.
    ///
    /// Blocking (`initdb` takes about a second): from async code, call it in
    /// `tokio::task::spawn_blocking` when the runtime has other work to do meanwhile.
    ///
    /// # Errors
    /// [`PostgresError::Skip`] without the binaries or, as root, without the `postgres` user;
    /// otherwise what went wrong, with the end of the log of the step that failed.
    pub fn start() -> Result<Self, PostgresError> {
        let bin = bin_dir().ok_or_else(|| {
            PostgresError::Skip(
                "PostgreSQL is not installed: no initdb and postgres in /usr/lib/postgresql/*/bin \
                 or on PATH (scripts/setup installs Debian's postgresql)"
                    .into(),
            )
        })?;
        let owner = server_user()?;
        let dir = tempfile::tempdir()?;
        if let Some(user) = &owner {
            // The server must own its data directory, and writes its sockets next to it.
            std::os::unix::fs::chown(dir.path(), Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
        }
        let cluster = Cluster {
            bin,
            owner,
            dir: dir.path().to_owned(),
        };
        cluster.initdb()?;
        cluster.create_database()?;
        for _ in 0..PORT_ATTEMPTS {
            let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
            if let Some(child) = cluster.serve(addr)? {
                return Ok(Self { child, addr, dir });
            }
        }
        Err(PostgresError::Start(format!(
            "another process took each of {PORT_ATTEMPTS} free ports before the server bound it: \
             {}",
            tail(&cluster.read_log("postgres.log"))
        )))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `postgres://probe@127.0.0.1:<port>/probe`: the trusted superuser (no password) and the
    /// test database, for any PostgreSQL client.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@{}/{DATABASE}", self.addr)
    }

    /// The cluster's directory (data in `data/`, the Unix socket, the logs); removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }
}

/// A started server for a test, or `None` when this machine cannot run one: the test says
/// `SKIPPED: <why>` ([`skipped_outside_ci`](crate::skipped_outside_ci)) and returns,
/// rather than passing without having run.
///
/// # Panics
/// When the server did not start, and under `CI` when this machine cannot run it.
pub fn postgres_or_skip() -> Option<Postgres> {
    match Postgres::start() {
        Ok(postgres) => Some(postgres),
        Err(PostgresError::Skip(why)) => {
            crate::skipped_outside_ci(&why);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        stop(&mut self.child);
        // `dir` is removed after this, once no process of the server writes into it.
    }
}

/// The cluster being set up: which binaries, as whom, where.
struct Cluster {
    bin: PathBuf,
    owner: Option<User>,
    dir: PathBuf,
}

impl Cluster {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `bin/<program>`, run as the cluster's owner, in its directory (the owner may not be
    /// allowed into ours), with its output in `<log>` in the directory.
    fn command(&self, program: &str, log: &str) -> Result<Command, PostgresError> {
        let log = File::create(self.dir.join(log))?;
        let mut command = Command::new(self.bin.join(program));
        command
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(user) = &self.owner {
            // std drops root's supplementary groups along with the uid.
            command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        Ok(command)
    }

    /// `<log>` in the directory, so far.
    fn read_log(&self, log: &str) -> String {
        std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
    }

    /// `initdb`: the cluster with [`USER`] as its superuser, trusted on every connection, and
    /// without the fsyncs of its files (a throw-away cluster).
    fn initdb(&self) -> Result<(), PostgresError> {
        let mut command = self.command("initdb", "initdb.log")?;
        command.arg("--pgdata").arg(self.data()).args([
            &format!("--username={USER}"),
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        self.run(command, "initdb", "initdb.log")
    }

    /// Creates [`DATABASE`] in single-user mode, before the server listens: the server binary is
    /// all it needs, no client and no connection.
    fn create_database(&self) -> Result<(), PostgresError> {
        let mut command = self.command("postgres", "single.log")?;
        command
            .arg("--single")
            .arg("-D")
            .arg(self.data())
            .args(["-c", "fsync=off", "postgres"])
            .stdin(Stdio::piped());
        let mut child = command.spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            // One statement per line; end of input ends the session.
            writeln!(stdin, "CREATE DATABASE {DATABASE};")?;
        }
        let status = wait(&mut child, START_TIMEOUT)?;
        let log = self.read_log("single.log");
        match status {
            // Single-user mode reports a failed statement in its output, not its exit status.
            Some(status) if status.success() && !log.contains("ERROR:") => Ok(()),
            Some(status) => Err(PostgresError::Start(format!(
                "creating database {DATABASE} (single-user mode) exited with {status}: {}",
                tail(&log)
            ))),
            None => Err(PostgresError::Start(format!(
                "creating database {DATABASE} took longer than {START_TIMEOUT:?}: {}",
                tail(&log)
            ))),
        }
    }

    /// Runs `command` to its end, within [`START_TIMEOUT`].
    fn run(&self, mut command: Command, what: &str, log: &str) -> Result<(), PostgresError> {
        let mut child = command.spawn()?;
        match wait(&mut child, START_TIMEOUT)? {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(PostgresError::Start(format!(
                "{what} exited with {status}: {}",
                tail(&self.read_log(log))
            ))),
            None => Err(PostgresError::Start(format!(
                "{what} took longer than {START_TIMEOUT:?}: {}",
                tail(&self.read_log(log))
            ))),
        }
    }

    /// Starts the server on `addr` and waits until it is ready; `None` when the port was taken
    /// in the meantime (the caller picks another).
    fn serve(&self, addr: SocketAddr) -> Result<Option<Child>, PostgresError> {
        let mut command = self.command("postgres", "postgres.log")?;
        command
            .arg("-D")
            .arg(self.data())
            .arg("-c")
            .arg(format!("listen_addresses={}", addr.ip()))
            .arg("-c")
            .arg(format!("port={}", addr.port()))
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.dir.display()))
            .args([
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "synchronous_commit=off",
            ]);
        let mut child = command.spawn()?;
        let deadline = Deadline::after(START_TIMEOUT);
        loop {
            let log = self.read_log("postgres.log");
            // Both: the log alone is written a moment before the socket accepts, and a
            // connection alone could reach whoever took the port first.
            if log.contains(READY)
                && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            {
                return Ok(Some(child));
            }
            if let Some(status) = child.try_wait()? {
                if log.contains("could not bind") || log.contains("Address already in use") {
                    return Ok(None);
                }
                return Err(PostgresError::Start(format!(
                    "postgres exited with {status}: {}",
                    tail(&log)
                )));
            }
            if deadline.passed() {
                stop(&mut child);
                return Err(PostgresError::Start(format!(
                    "not ready on {addr} after {START_TIMEOUT:?}: {}",
                    tail(&self.read_log("postgres.log"))
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Who the server runs as: `None` (whoever we are) unless we are root, which PostgreSQL refuses
/// to run as; then Debian's `postgres` user.
fn server_user() -> Result<Option<User>, PostgresError> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    match User::from_name("postgres") {
        Ok(Some(user)) => Ok(Some(user)),
        Ok(None) => Err(PostgresError::Skip(
            "PostgreSQL refuses to run as root, and there is no `postgres` user to run it as \
             (scripts/setup installs Debian's postgresql, which creates it)"
                .into(),
        )),
        Err(errno) => Err(PostgresError::Io(io::Error::from(errno))),
    }
}

/// The directory with `initdb` and `postgres`: Debian's, `/usr/lib/postgresql/<version>/bin`
/// (off `PATH`; the newest version when several are installed), else wherever `PATH` has them.
fn bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version: Vec<u32> = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            let bin = entry.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .max_by(|(a, _), (b, _)| a.cmp(b))
        .map(|(_, bin)| bin);
    debian.or_else(|| {
        super::which("postgres")
            .and_then(|postgres| postgres.parent().map(Path::to_path_buf))
            .filter(|dir| has_both(dir))
    })
}

/// Shuts the server down: an immediate shutdown (SIGQUIT: the postmaster stops its backends,
/// waits for them and exits, skipping the checkpoint a cluster about to be deleted has no use
/// for), then SIGKILL after [`STOP_TIMEOUT`]. Its backends are sessions of their own, so a
/// process group would not reach them; the postmaster does.
fn stop(child: &mut Child) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
        if matches!(wait(child, STOP_TIMEOUT), Ok(Some(_))) {
            return;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits up to `timeout` for `child` to exit: its status, or `None` when it is still running.
fn wait(child: &mut Child, timeout: Duration) -> io::Result<Option<std::process::ExitStatus>> {
    let deadline = Deadline::after(timeout);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if deadline.passed() {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last [`LOG_TAIL_LINES`] lines of `log`, on lines of their own.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    format!("\n{}", lines[start..].join("\n"))
}

/// A deadline on the real clock. The real peers of these fixtures run in real time, so their
/// deadlines must too: on the paused tokio clock of a test (`start_paused`) a blocking loop would
/// never see `tokio::time::Instant` advance, and an awaiting one would see it leap ahead.
#[allow(clippy::disallowed_types)]
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadline(std::time::Instant);

#[allow(clippy::disallowed_types)]
impl Deadline {
    /// `timeout` from now.
    pub(super) fn after(timeout: Duration) -> Self {
        Self(std::time::Instant::now() + timeout)
    }

    /// Whether it has passed.
    pub(super) fn passed(self) -> bool {
        std::time::Instant::now() >= self.0
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::net::TcpStream;
    use std::time::Duration;

    use sqlx::Connection as _;

    use super::postgres_or_skip;

    #[tokio::test]
    async fn a_started_server_answers_queries_as_the_url_says_and_is_gone_when_dropped() {
        let Some(postgres) = postgres_or_skip() else {
            return;
        };
        let addr = postgres.addr();
        assert!(addr.ip().is_loopback(), "{addr}");
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();

        let url = postgres.url();
        assert_eq!(url, format!("postgres://probe@{addr}/probe"));
        let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert_eq!(one, 1);
        let (user, database, superuser): (String, String, bool) = sqlx::query_as(
            "SELECT current_user::text, current_database()::text, \
             (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)",
        )
        .fetch_one(&mut connection)
        .await
        .unwrap();
        assert_eq!(
            (user.as_str(), database.as_str(), superuser),
            ("probe", "probe", true)
        );
        // The durability the fixture turns off, to be fast, is off.
        let fsync: String = sqlx::query_scalar("SHOW fsync")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert_eq!(fsync, "off");
        connection.close().await.unwrap();

        let dir = postgres.dir().to_owned();
        drop(postgres);
        let refused = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{refused}");
        assert!(!dir.exists(), "{} outlived the server", dir.display());
    }

    #[tokio::test]
    async fn servers_side_by_side_are_clusters_of_their_own() {
        let (Some(a), Some(b)) = (postgres_or_skip(), postgres_or_skip()) else {
            return;
        };
        assert_ne!(a.addr(), b.addr());
        let mut to_a = sqlx::PgConnection::connect(&a.url()).await.unwrap();
        let mut to_b = sqlx::PgConnection::connect(&b.url()).await.unwrap();
        sqlx::query("CREATE TABLE only_in_a (x int)")
            .execute(&mut to_a)
            .await
            .unwrap();
        let in_b: Option<String> = sqlx::query_scalar("SELECT to_regclass('only_in_a')::text")
            .fetch_one(&mut to_b)
            .await
            .unwrap();
        assert_eq!(in_b, None);
    }
}

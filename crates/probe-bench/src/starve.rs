//! Load harness: false DOWN verdicts of a prober starved of CPU, with and without self-health
//! awareness ([`probe::health`]).
//!
//! ```text
//! probe-bench starve [--targets 500] [--interval-ms 500]
//!     [--timeout-ms 50] [--fall 2] [--starve-first-s 4] [--duration-s 20] [--burners 4]
//! ```
//!
//! Three kinds of processes, all this binary (`starve` with a flag hidden from `--help`):
//! - a **responder** (`--serve`, started with `nice -n -5`, which needs root; otherwise at the
//!   default priority): four listeners on 127.0.0.2..5 that answer `PONG` to `PING`;
//! - a **prober** (`--probe on|off`, started with `nice -n 19`): the engine with `--targets` TCP
//!   targets (send `PING`, expect `PONG`, `--timeout-ms`, `--interval-ms`, `fall` `--fall`,
//!   `rise` 1, jitter 0.1) spread over the listeners, with self-health awareness on or off;
//! - **burners** (`--burn`, at the default priority): `--burners` busy loops, twice the cores by
//!   default, so the prober gets the leftovers of the CPU, as a prober does beside a noisy
//!   neighbour or in a throttled container.
//!
//! Each phase (off, then on) starts a prober, waits until every target is UP (before any
//! burner runs), starts the burners, lets them starve the prober for `--starve-first-s`, then
//! counts the prober's DOWN transitions for `--duration-s` (every target is healthy, so each is
//! a false DOWN), samples the engine's multiplier throughout, and stops the burners (as soon as
//! the prober prints its figures: beside them a prober at nice 19 takes seconds to exit) and
//! the prober.
//!
//! Why the burners run before the count starts: Linux (6.x, EEVDF) does not starve a task the
//! moment competitors arrive. A prober that mostly slept has credit, and at nice 19 it spends it
//! for a few seconds before its share falls to what its weight gives; measured on 2 cores
//! (kernel 6.18), no false DOWN in the first 3 s, a few in the fourth and fifth, then 30 to 160
//! a second. A window that opens with the burners counts mostly that grace period: 4 s windows
//! from the start showed 0 to 29 false DOWNs without self-health, where 3 s windows after 4 s of
//! starving show 160 to 220 (and 0 with it). The multiplier is sampled from the start, since
//! self-health reacts to the onset. A phase prints
//! `RESULT scenario=self-protection metric=false_down_{off,on} value=N unit=transitions`, and the
//! run ends with `metric=ratio` (on / off; goal <= 0.1) and `metric=max_multiplier_on`.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use probe::engine::{Engine, EngineConfig};
use probe::health::{HealthState, Schedule, ScheduleSettings, SelfHealthConfig, Thresholds};
use probe::tier::ProbeSpec;
use probe::tier::tcp::{TcpExpect, TcpSpec};
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::support;

/// Flags of `probe-bench starve`.
#[derive(clap::Args)]
pub struct Args {
    /// TCP targets of each prober.
    #[arg(long, default_value_t = 500)]
    targets: usize,
    /// Each target's interval, in ms.
    #[arg(long = "interval-ms", value_name = "MS", default_value = "500", value_parser = support::millis)]
    interval: Duration,
    /// The probe timeout, in ms: short, so that a starved prober misses it.
    #[arg(long = "timeout-ms", value_name = "MS", default_value = "50", value_parser = support::millis)]
    timeout: Duration,
    /// Consecutive failures to DOWN.
    #[arg(long, default_value_t = 2)]
    fall: u32,
    /// How long the burners starve the prober before DOWNs count, in seconds.
    #[arg(long = "starve-first-s", value_name = "S", default_value = "4", value_parser = support::secs)]
    starve_first: Duration,
    /// How long DOWNs are counted, in seconds.
    #[arg(long = "duration-s", value_name = "S", default_value = "20", value_parser = support::secs)]
    duration: Duration,
    /// Busy-loop processes (default: twice the cores).
    #[arg(long, default_value_t = 2 * std::thread::available_parallelism().map_or(2, |n| n.get()))]
    burners: usize,
    /// Runs as the responder process.
    #[arg(long, hide = true, conflicts_with_all = ["probe", "burn"])]
    serve: bool,
    /// Runs as a prober process, with self-health awareness on or off.
    #[arg(long, hide = true, value_name = "on|off", requires = "addrs")]
    probe: Option<SelfHealth>,
    /// The responder's listeners, for a prober.
    #[arg(long, hide = true, value_delimiter = ',')]
    addrs: Vec<SocketAddr>,
    /// Runs as a burner process.
    #[arg(long, hide = true, conflicts_with = "probe")]
    burn: bool,
}

/// A prober's self-health awareness.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SelfHealth {
    /// On: the engine discounts its own lateness.
    On,
    /// Off: every timeout counts.
    Off,
}

impl SelfHealth {
    fn name(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

/// Runs `probe-bench starve`, or one of its helper processes.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.serve {
        serve()
    } else if args.burn {
        loop {
            std::hint::spin_loop();
        }
    } else if let Some(self_health) = args.probe {
        probe(&args, self_health == SelfHealth::On, &args.addrs)
    } else {
        orchestrate(&args)
    }
}

/// Starts this binary with `args`, under `nice -n <niceness>`.
fn spawn(niceness: i32, args: &[String]) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding this binary")?;
    Command::new("nice")
        .arg("-n")
        .arg(niceness.to_string())
        .arg(exe)
        .arg("starve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting a child (is `nice` installed?)")
}

fn first_line(child: &mut Child) -> anyhow::Result<(String, BufReader<std::process::ChildStdout>)> {
    let stdout = child.stdout.take().context("child stdout")?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).context("reading the child")?;
    Ok((line.trim().to_owned(), reader))
}

fn orchestrate(args: &Args) -> anyhow::Result<()> {
    let mut responder = spawn(-5, &["--serve".into()])?;
    let (addrs, _keep) = first_line(&mut responder)?;
    println!(
        "{} targets, interval {:?}, timeout {:?}, fall {}, {} burners, {:?} of starving then {:?} \
         counted per phase; listeners {addrs}",
        args.targets,
        args.interval,
        args.timeout,
        args.fall,
        args.burners,
        args.starve_first,
        args.duration
    );
    let mut counts = Vec::new();
    for mode in [SelfHealth::Off, SelfHealth::On] {
        let prober_args = vec![
            "--probe".to_owned(),
            mode.name().to_owned(),
            "--addrs".into(),
            addrs.clone(),
            "--targets".into(),
            args.targets.to_string(),
            "--interval-ms".into(),
            args.interval.as_millis().to_string(),
            "--timeout-ms".into(),
            args.timeout.as_millis().to_string(),
            "--fall".into(),
            args.fall.to_string(),
            "--starve-first-s".into(),
            args.starve_first.as_secs_f64().to_string(),
            "--duration-s".into(),
            args.duration.as_secs_f64().to_string(),
        ];
        let mut prober = spawn(19, &prober_args)?;
        let (ready, mut rest) = first_line(&mut prober)?;
        if ready != "READY" {
            bail!("prober: {ready}");
        }
        let mut burners = (0..args.burners)
            .map(|_| spawn(0, &["--burn".into()]))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut report = String::new();
        for line in (&mut rest).lines() {
            let line = line?;
            println!("{line}");
            // The prober prints its figures when its window ends: the burners have done their
            // part, and a prober at nice 19 beside them would take seconds to exit.
            if line.starts_with("RESULT ") {
                stop(&mut burners);
            }
            report.push_str(&line);
            report.push('\n');
        }
        prober.wait()?;
        stop(&mut burners);
        let downs: f64 = report
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "RESULT scenario=self-protection metric=false_down_{} value=",
                    mode.name()
                ))
            })
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("prober printed no count")?;
        // The burners and the prober have exited (waited for above): the next phase starts on
        // an idle machine without a pause.
        counts.push(downs);
    }
    let _ = responder.kill();
    let _ = responder.wait();
    let (off, on) = (counts[0], counts[1]);
    let ratio = if off > 0.0 { on / off } else { f64::NAN };
    support::result("self-protection", "ratio", ratio, "on/off");
    println!("false DOWN transitions while starved: {off} without self-health, {on} with it");
    Ok(())
}

/// Kills and reaps the burners (none left afterwards, so a second call does nothing).
fn stop(burners: &mut Vec<Child>) {
    for mut burner in burners.drain(..) {
        let _ = burner.kill();
        let _ = burner.wait();
    }
}

/// The responder: four listeners answering `PONG` to `PING`, their addresses on one line.
fn serve() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut addrs = Vec::new();
        for host in 2..=5 {
            let listener = tokio::net::TcpListener::bind(format!("127.0.0.{host}:0")).await?;
            addrs.push(listener.local_addr()?.to_string());
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        let mut buf = [0u8; 16];
                        if stream.read(&mut buf).await.is_ok() {
                            let _ = stream.write_all(b"PONG\n").await;
                        }
                    });
                }
            });
        }
        println!("{}", addrs.join(","));
        std::io::stdout().flush()?;
        std::future::pending::<anyhow::Result<()>>().await
    })
}

/// The prober: waits for every target UP, says `READY`, then counts DOWN transitions.
fn probe(args: &Args, self_health: bool, addrs: &[SocketAddr]) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let cancel = CancellationToken::new();
        let engine = Engine::start(
            EngineConfig {
                self_health: self_health.then(SelfHealthConfig::default),
                ..EngineConfig::default()
            },
            cancel.clone(),
        );
        let mut events = engine.subscribe();
        let schedule = Schedule::try_new(ScheduleSettings {
            interval: args.interval,
            timeout: args.timeout,
            jitter: 0.1,
            backoff_jitter: Some(0.0),
            ..ScheduleSettings::default()
        })?;
        let specs = (0..args.targets)
            .map(|i| {
                let address = Address::Socket(addrs[i % addrs.len()]);
                Ok(TargetSpec::new(
                    TargetId::new(&format!("t{i}"))?,
                    ProbeSpec::Tcp(
                        TcpSpec::connect(address)
                            .with_send(b"PING\n")
                            .with_expect(TcpExpect::Contains(b"PONG".to_vec())),
                    ),
                )
                .with_schedule(schedule)
                .with_thresholds(Thresholds::new(
                    std::num::NonZeroU32::MIN,
                    std::num::NonZeroU32::new(args.fall).context("--fall must be >= 1")?,
                ))
                .with_flap(None))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        engine.apply(specs)?;
        let mut up = 0;
        while up < args.targets {
            if events.recv().await?.to == HealthState::Up {
                up += 1;
            }
        }
        println!("READY");
        std::io::stdout().flush()?;
        let max_multiplier = Arc::new(AtomicU32::new(0));
        let sampler = {
            let (engine, max) = (engine.clone(), max_multiplier.clone());
            tokio::spawn(async move {
                loop {
                    max.fetch_max(engine.workload().lateness.unwrap_or(0), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let mut downs = 0u64;
        // The burners start when READY is read; the count starts once they have starved the
        // prober for `--starve-first-s`.
        let counting_from = tokio::time::Instant::now() + args.starve_first;
        let deadline = tokio::time::sleep_until(counting_from + args.duration);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => break,
                event = events.recv() => {
                    let down = event.map(|e| e.to == HealthState::Down).unwrap_or(false);
                    if down && tokio::time::Instant::now() >= counting_from {
                        downs += 1;
                    }
                }
            }
        }
        sampler.abort();
        let mode = if self_health { "on" } else { "off" };
        support::result(
            "self-protection",
            &format!("false_down_{mode}"),
            downs as f64,
            "transitions",
        );
        if self_health {
            support::result(
                "self-protection",
                "max_multiplier_on",
                f64::from(max_multiplier.load(Ordering::Relaxed)),
                "x",
            );
        }
        cancel.cancel();
        Ok(())
    })
}

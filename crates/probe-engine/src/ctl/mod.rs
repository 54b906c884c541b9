//! `probe-engine ctl`: the health API from the shell, as kubectl and etcdctl drive theirs.
//!
//! Every subcommand is one or a few API calls (`client`), printed as a table or the API's own
//! JSON or YAML (`render`). Exit codes: 0 done; 1 the API said no (its reason on stderr);
//! 2 a usage error (clap's); 3 the daemon could not be reached; 4 it refused the token.

mod client;
mod render;

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand, ValueEnum};
use reqwest::Method;
use serde_json::{Value, json};

pub use client::Connection;
use client::{Api, CallError, with_query};
use render::{Style, Table, ago, cell, score};

/// How a listing is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Columns sized to the terminal.
    #[default]
    Table,
    /// More columns (owner, role, last note, uptime over 24 h).
    Wide,
    /// The API's own JSON: stable, for scripts.
    Json,
    /// The same as YAML.
    Yaml,
}

/// `ctl`'s flags and subcommand.
#[derive(Debug, Args)]
pub struct Ctl {
    #[command(flatten)]
    connection: Connection,
    /// How to print.
    #[arg(long, short, value_enum, default_value_t = Output::Table, global = true)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Api(ApiCommand),
    /// Validate a config, as `probe-engine check` does.
    CheckConfig {
        /// A YAML file, or a directory whose *.yaml and *.yml files are merged.
        #[arg(long, short, default_value = "probes")]
        config: std::path::PathBuf,
    },
}

/// The subcommands that call the API.
#[derive(Debug, Subcommand)]
enum ApiCommand {
    /// The targets, filtered: id, state, since, score, reason, latency.
    Targets {
        /// Only these states, comma-separated (`DOWN,DEGRADED`).
        #[arg(long)]
        state: Option<String>,
        /// Only the targets this group covers.
        #[arg(long)]
        group: Option<String>,
        /// Only this probe kind (`tcp`, `http`, ...).
        #[arg(long)]
        kind: Option<String>,
        /// Only ids containing this text.
        #[arg(long = "match", value_name = "TEXT")]
        matching: Option<String>,
        /// In a cluster, only the targets this member owns (every member's, not only this
        /// one's).
        #[arg(long)]
        owner: Option<String>,
    },
    /// One target: its state, recent results, uptime over 24 h, 7 d and 30 d, TLS and votes.
    Get {
        /// The target's id.
        id: String,
    },
    /// Why a target or group scores what it does: the tree of its dependencies.
    Explain {
        /// The target's or group's id.
        id: String,
    },
    /// Operator maintenance.
    Maintenance {
        #[command(subcommand)]
        action: Maintenance,
    },
    /// Follow the transitions as they happen, one line each.
    Events {
        /// Only this target's, after its recent ones from the history.
        #[arg(long)]
        target: Option<String>,
        /// With --target: how far back the recent ones go.
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        since: Duration,
    },
    /// Exact uptime over a window.
    Uptime {
        /// The target's or group's id.
        id: String,
        /// `24h`, `7d`, `30d`, `90d`, or `FROM..UNTIL` in RFC 3339.
        #[arg(long, default_value = "24h")]
        window: String,
    },
    /// Transitions and operator actions, newest first.
    History {
        /// The target's id.
        id: String,
        /// How far back (a duration ago, or RFC 3339).
        #[arg(long, default_value = "6h")]
        since: String,
    },
    /// The alerts firing now; `alerts test` sends a test notification to every receiver.
    Alerts {
        #[command(subcommand)]
        action: Option<Alerts>,
    },
    /// The cluster's members: address, lease, owned and replicated targets, staleness.
    Cluster,
    /// Where the targets come from, and the entries left out.
    Topology,
    /// Start the daemon's stop sequence.
    Drain,
}

#[derive(Debug, Subcommand)]
enum Maintenance {
    /// Put a target, or every target of a group, in maintenance.
    Set {
        /// The target's id (or --group).
        #[arg(required_unless_present = "group", conflicts_with = "group")]
        id: Option<String>,
        /// Every target the group covers.
        #[arg(long)]
        group: Option<String>,
        /// How long (up to 30 days).
        #[arg(long = "for", value_name = "DURATION")]
        duration: String,
        /// Why, for whoever looks.
        #[arg(long)]
        reason: String,
    },
    /// End it.
    End {
        /// The target's id (or --group).
        #[arg(required_unless_present = "group", conflicts_with = "group")]
        id: Option<String>,
        /// Every target the group covers.
        #[arg(long)]
        group: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum Alerts {
    /// Send a test notification to every receiver, and say how each took it.
    Test,
}

/// What a command printed, or why it failed.
type Done = Result<String, CallError>;

/// Runs `ctl`; the exit code.
pub fn run(ctl: Ctl) -> ExitCode {
    let command = match ctl.command {
        Command::CheckConfig { config } => return crate::check(&config),
        Command::Api(command) => command,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let style = Style::detect();
    let done = runtime.block_on(async {
        let api = Api::new(&ctl.connection)?;
        call(&api, ctl.output, style, command).await
    });
    match done {
        Ok(text) => crate::print_all(text.as_bytes()),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

async fn call(api: &Api, output: Output, style: Style, command: ApiCommand) -> Done {
    match command {
        ApiCommand::Targets {
            state,
            group,
            kind,
            matching,
            owner,
        } => {
            let mut pairs = Vec::new();
            for (name, value) in [
                ("state", state),
                ("group", group),
                ("kind", kind),
                ("match", matching),
            ] {
                if let Some(value) = value {
                    pairs.push((name, value));
                }
            }
            if let Some(owner) = owner {
                pairs.push(("scope", "cluster".to_owned()));
                pairs.push(("owner", owner));
            }
            let targets = targets(api, &pairs).await?;
            Ok(match output {
                Output::Json => render::json(&json!({ "targets": targets })),
                Output::Yaml => render::yaml(&json!({ "targets": targets })),
                Output::Table | Output::Wide => {
                    target_table(api, &targets, output == Output::Wide, style).await
                }
            })
        }
        ApiCommand::Get { id } => get(api, &id, output, style).await,
        ApiCommand::Explain { id } => {
            let explained = api.get(&format!("/v1/targets/{id}/explain")).await?;
            Ok(shown(&explained, output, || {
                explain_tree(&explained, style)
            }))
        }
        ApiCommand::Maintenance { action } => maintenance(api, action, output).await,
        ApiCommand::Events { target, since } => events(api, target, since, output, style).await,
        ApiCommand::Uptime { id, window } => {
            let uptime = api
                .get(&with_query(
                    &format!("/v1/targets/{id}/uptime"),
                    &[("window", window)],
                ))
                .await?;
            Ok(shown(&uptime, output, || {
                let mut table = Table::new(vec!["ID", "WINDOW", "UPTIME", "DOWN", "MAINTENANCE"]);
                table.row(vec![
                    cell(&uptime["target"]),
                    cell(&uptime["window"]),
                    percent(&uptime["uptime"]),
                    millis(&uptime["down_ms"]),
                    millis(&uptime["maintenance_ms"]),
                ]);
                table.render(style)
            }))
        }
        ApiCommand::History { id, since } => {
            let history = api
                .get(&with_query(
                    &format!("/v1/targets/{id}/history"),
                    &[("since", since)],
                ))
                .await?;
            Ok(shown(&history, output, || {
                let mut table =
                    Table::new(vec!["AT", "FROM", "TO", "CAUSE", "DETAIL"]).state_column(2);
                for t in history["transitions"].as_array().into_iter().flatten() {
                    table.row(vec![
                        cell(&t["at"]),
                        cell(&t["from"]),
                        cell(&t["to"]),
                        cell(&t["cause"]),
                        cell(&t["detail"]),
                    ]);
                }
                let mut text = table.render(style);
                let actions = history["actions"].as_array().into_iter().flatten();
                for a in actions {
                    text.push_str(&format!(
                        "{} {} by {}: {}\n",
                        cell(&a["at"]),
                        cell(&a["action"]),
                        cell(&a["who"]),
                        cell(&a["detail"])
                    ));
                }
                text
            }))
        }
        ApiCommand::Alerts { action: None } => {
            let alerts = api.get("/v1/alerts").await?;
            Ok(shown(&alerts, output, || {
                let mut table = Table::new(vec!["ALERT", "TARGET", "SINCE", "SEVERITY", "SUMMARY"]);
                let now = SystemTime::now();
                for a in alerts["alerts"].as_array().into_iter().flatten() {
                    table.row(vec![
                        cell(&a["labels"]["alertname"]),
                        cell(&a["labels"]["target"]),
                        ago(&a["startsAt"], now),
                        cell(&a["labels"]["severity"]),
                        cell(&a["annotations"]["summary"]),
                    ]);
                }
                table.render(style)
            }))
        }
        ApiCommand::Alerts {
            action: Some(Alerts::Test),
        } => {
            let sent = api.change(Method::POST, "/v1/alerts/test", None).await?;
            Ok(shown(&sent, output, || {
                let mut table = Table::new(vec!["RECEIVER", "DELIVERED", "ERROR"]);
                for r in sent["receivers"].as_array().into_iter().flatten() {
                    table.row(vec![
                        cell(&r["receiver"]),
                        cell(&r["delivered"]),
                        cell(&r["error"]),
                    ]);
                }
                table.render(style)
            }))
        }
        ApiCommand::Cluster => {
            let cluster = api.get("/v1/cluster").await?;
            Ok(shown(&cluster, output, || {
                let mut text = format!(
                    "member {} (lease {}{})\n",
                    cell(&cluster["member"]),
                    cell(&cluster["lease"]),
                    if cluster["stale"] == true {
                        ", view stale"
                    } else {
                        ""
                    }
                );
                let mut table = Table::new(vec![
                    "MEMBER",
                    "ADDRESS",
                    "LEASE",
                    "OWNED",
                    "REPLICATED",
                    "SINCE",
                    "VERSION",
                ]);
                let now = SystemTime::now();
                for m in cluster["members"].as_array().into_iter().flatten() {
                    table.row(vec![
                        cell(&m["name"]),
                        cell(&m["address"]),
                        cell(&m["lease"]),
                        cell(&m["owned"]),
                        cell(&m["replicated"]),
                        ago(&m["since"], now),
                        cell(&m["version"]),
                    ]);
                }
                text.push_str(&table.render(style));
                text
            }))
        }
        ApiCommand::Topology => {
            let topology = api.get("/v1/topology").await?;
            Ok(shown(&topology, output, || {
                let mut table = Table::new(vec!["SOURCE", "STATE", "LAST ERROR"]);
                for s in topology["sources"].as_array().into_iter().flatten() {
                    table.row(vec![
                        cell(&s["name"]),
                        cell(&s["state"]),
                        cell(&s["last_error"]),
                    ]);
                }
                let mut text = format!("generation {}\n", cell(&topology["generation"]));
                text.push_str(&table.render(style));
                for r in topology["rejected"].as_array().into_iter().flatten() {
                    text.push_str(&format!(
                        "rejected {} from {} ({}): {}\n",
                        cell(&r["name"]),
                        cell(&r["source"]),
                        cell(&r["origin"]),
                        cell(&r["reason"])
                    ));
                }
                text
            }))
        }
        ApiCommand::Drain => {
            let answer = api.change(Method::POST, "/v1/drain", None).await?;
            Ok(shown(&answer, output, || "draining\n".to_owned()))
        }
    }
}

/// Every target the query lists, a page of 1,000 at a time.
async fn targets(api: &Api, pairs: &[(&str, String)]) -> Result<Vec<Value>, CallError> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query: Vec<(&str, String)> = pairs.to_vec();
        query.push(("limit", "1000".to_owned()));
        if let Some(cursor) = &cursor {
            query.push(("cursor", cursor.clone()));
        }
        let page = api.get(&with_query("/v1/targets", &query)).await?;
        all.extend(page["targets"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(all),
        }
    }
}

/// Each of `targets`' uptime over 24 h, as a percentage, from `/v1/uptime` a thousand at a time;
/// none without history.
async fn uptimes_24h(api: &Api, targets: &[Value]) -> HashMap<String, String> {
    let ids: Vec<&str> = targets.iter().filter_map(|t| t["id"].as_str()).collect();
    let mut found = HashMap::new();
    for chunk in ids.chunks(1000) {
        let query = [("window", "24h".to_owned()), ("target", chunk.join(","))];
        // Without history (503) there is no uptime to show: the rest of the table still is.
        let Ok(answer) = api.get(&with_query("/v1/uptime", &query)).await else {
            break;
        };
        for u in answer["uptimes"].as_array().into_iter().flatten() {
            if let Some(id) = u["target"].as_str() {
                found.insert(id.to_owned(), percent(&u["uptime"]));
            }
        }
    }
    found
}

async fn target_table(api: &Api, targets: &[Value], wide: bool, style: Style) -> String {
    let mut header = vec!["ID", "STATE", "SINCE", "SCORE", "REASON", "LATENCY"];
    if wide {
        header = vec![
            "ID",
            "STATE",
            "SINCE",
            "SCORE",
            "LATENCY",
            "OWNER",
            "ROLE",
            "UPTIME 24H",
            "NOTE",
            "REASON",
        ];
    }
    let mut table = Table::new(header).state_column(1);
    let uptimes = if wide {
        uptimes_24h(api, targets).await
    } else {
        HashMap::new()
    };
    let now = SystemTime::now();
    for t in targets {
        let reason = match (&t["last_failure"], t["state"].as_str()) {
            (failure, Some("DOWN" | "PROBING")) if !failure.is_null() => cell(&failure["detail"]),
            (_, Some("MAINTENANCE")) => cell(&t["maintenance"]["reason"]),
            (_, Some("DEGRADED")) => t["degraded_reasons"]
                .as_array()
                .map(|r| r.iter().map(cell).collect::<Vec<_>>().join("; "))
                .unwrap_or_default(),
            _ => "-".to_owned(),
        };
        let latency = t["last"]["latency_ms"]
            .as_f64()
            .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}ms"));
        let mut row = vec![
            cell(&t["id"]),
            cell(&t["state"]),
            ago(&t["since"], now),
            score(&t["score"]),
        ];
        if wide {
            let uptime = t["id"]
                .as_str()
                .and_then(|id| uptimes.get(id).cloned())
                .unwrap_or_else(|| "-".to_owned());
            row.extend([
                latency,
                cell(&t["owner"]),
                cell(&t["role"]),
                uptime,
                cell(&t["last"]["note"]),
                reason,
            ]);
        } else {
            row.extend([reason, latency]);
        }
        table.row(row);
    }
    table.render(style)
}

async fn get(api: &Api, id: &str, output: Output, style: Style) -> Done {
    let mut target = api.get(&format!("/v1/targets/{id}")).await?;
    let mut uptime = serde_json::Map::new();
    for window in ["24h", "7d", "30d"] {
        // Without history (503) there is no uptime to show: the rest still is.
        match api
            .get(&format!("/v1/targets/{id}/uptime?window={window}"))
            .await
        {
            Ok(u) => {
                uptime.insert(window.to_owned(), u["uptime"].clone());
            }
            Err(CallError::Api { .. }) => {
                uptime.insert(window.to_owned(), Value::Null);
            }
            Err(e) => return Err(e),
        }
    }
    target["uptime"] = Value::Object(uptime);
    Ok(shown(&target, output, || {
        let now = SystemTime::now();
        let mut text = format!(
            "{} ({})  {}  since {}  score {}\n",
            cell(&target["id"]),
            cell(&target["kind"]),
            style.state(target["state"].as_str().unwrap_or("-")),
            ago(&target["since"], now),
            score(&target["score"]),
        );
        text.push_str(&format!(
            "uptime  24h {}  7d {}  30d {}\n",
            percent(&target["uptime"]["24h"]),
            percent(&target["uptime"]["7d"]),
            percent(&target["uptime"]["30d"])
        ));
        if !target["last_failure"].is_null() {
            text.push_str(&format!(
                "last failure  {}: {}\n",
                cell(&target["last_failure"]["reason"]),
                cell(&target["last_failure"]["detail"])
            ));
        }
        if !target["maintenance"].is_null() {
            text.push_str(&format!(
                "maintenance  {} (until {})\n",
                cell(&target["maintenance"]["reason"]),
                cell(&target["maintenance"]["until"])
            ));
        }
        if let Some(tls) = target["tls"].as_object() {
            text.push_str(&format!(
                "tls  {}  {}  expires {} ({} days)\n",
                cell(&tls["version"]),
                cell(&tls["subject"]),
                cell(&tls["earliest_expiry"]),
                cell(&tls["days_left"])
            ));
        }
        if let Some(votes) = target["votes"].as_object() {
            let votes: Vec<String> = votes
                .iter()
                .map(|(m, s)| format!("{m} {}", cell(s)))
                .collect();
            text.push_str(&format!("votes  {}\n", votes.join(", ")));
        }
        let mut table = Table::new(vec!["AT", "OK", "LATENCY", "REASON"]);
        for r in target["history"].as_array().into_iter().flatten().rev() {
            table.row(vec![
                cell(&r["at"]),
                cell(&r["ok"]),
                r["latency_ms"]
                    .as_f64()
                    .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}ms")),
                cell(&r["reason"]),
            ]);
        }
        text.push_str(&table.render(style));
        text
    }))
}

/// The explanation as an indented tree: the node, then each dependency with its weight, what
/// caps the score, and the root causes.
fn explain_tree(explained: &Value, style: Style) -> String {
    let node = &explained["node"];
    let mut text = format!(
        "{} ({}) {} score {}{}\n",
        cell(&node["id"]),
        cell(&node["kind"]),
        style.state(node["state"].as_str().unwrap_or("-")),
        score(&node["score"]),
        if node["dependency_down"] == true {
            ", a critical dependency DOWN"
        } else {
            ""
        }
    );
    let children = explained["children"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, child) in children.iter().enumerate() {
        let branch = if i + 1 == children.len() {
            "└─"
        } else {
            "├─"
        };
        text.push_str(&format!(
            "{branch} {} {} score {}  weight {:.2}{}{}\n",
            cell(&child["id"]),
            style.state(child["state"].as_str().unwrap_or("-")),
            score(&child["score"]),
            child["weight"].as_f64().unwrap_or_default(),
            if child["critical"] == true {
                ", critical"
            } else {
                ""
            },
            if child["caps"] == true {
                ", caps the score"
            } else {
                ""
            },
        ));
    }
    let causes: Vec<String> = explained["root_causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c.as_str().map_or_else(|| cell(&c["id"]), str::to_owned))
        .collect();
    if !causes.is_empty() {
        text.push_str(&format!("root causes: {}\n", causes.join(", ")));
    }
    text
}

async fn maintenance(api: &Api, action: Maintenance, output: Output) -> Done {
    let (id, group) = match &action {
        Maintenance::Set { id, group, .. } | Maintenance::End { id, group } => (id, group),
    };
    let ids: Vec<String> = match (id, group) {
        (Some(id), _) => vec![id.clone()],
        (None, Some(group)) => targets(api, &[("group", group.clone())])
            .await?
            .iter()
            .filter_map(|t| t["id"].as_str().map(str::to_owned))
            .collect(),
        (None, None) => Vec::new(),
    };
    let mut answers = Vec::new();
    for id in &ids {
        let path = format!("/v1/targets/{id}/maintenance");
        let answer = match &action {
            Maintenance::Set {
                duration, reason, ..
            } => {
                let body = json!({ "reason": reason, "duration": duration });
                api.change(Method::PUT, &path, Some(&body)).await?
            }
            Maintenance::End { .. } => api.change(Method::DELETE, &path, None).await?,
        };
        answers.push(answer);
    }
    let answered = json!({ "targets": answers });
    Ok(shown(&answered, output, || {
        answers
            .iter()
            .map(|a| format!("{} {}\n", cell(&a["id"]), cell(&a["state"])))
            .collect()
    }))
}

/// One transition as a line: when, which, from, to, why.
fn transition_line(t: &Value, target: Option<&str>, style: Style) -> String {
    format!(
        "{}  {}  {} -> {}  {}{}\n",
        cell(&t["at"]),
        t["target"].as_str().or(target).unwrap_or("-"),
        style.state(t["from"].as_str().unwrap_or("-")),
        style.state(t["to"].as_str().unwrap_or("-")),
        cell(&t["cause"]),
        t["detail"]
            .as_str()
            .map(|d| format!(": {d}"))
            .unwrap_or_default()
    )
}

/// Prints the recent transitions (with `--target`), then follows the stream until it ends.
async fn events(
    api: &Api,
    target: Option<String>,
    since: Duration,
    output: Output,
    style: Style,
) -> Done {
    let mut out = std::io::stdout();
    // Whether the reader is still there: once it is gone (`| head`), following is over.
    let mut say = |text: String| {
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_ok()
    };
    let line = |t: &Value| match output {
        Output::Json => format!("{t}\n"),
        Output::Yaml => format!("---\n{}", render::yaml(t)),
        Output::Table | Output::Wide => transition_line(t, target.as_deref(), style),
    };
    // Open the stream first, so nothing between the history and the stream is missed. The
    // daemon keeps to the one target: the rest of the fleet's changes never travel.
    let path = match &target {
        Some(id) => format!("/v1/events?target={id}"),
        None => "/v1/events".to_owned(),
    };
    let mut stream = api.stream(&path).await?;
    // On stderr, so that the transitions alone go where stdout goes; and once the stream is
    // open, so that whoever waits for it knows nothing from now on is missed.
    eprintln!("following {} (Ctrl-C to stop)", api.url("/v1/events"));
    let mut seen = BTreeSet::new();
    if let Some(id) = &target {
        let secs = since.as_secs().max(1);
        let history = api
            .get(&format!("/v1/targets/{id}/history?since={secs}s"))
            .await;
        match history {
            Ok(history) => {
                let mut recent: Vec<Value> = history["transitions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                recent.reverse();
                for t in recent {
                    seen.insert((cell(&t["at"]), cell(&t["to"])));
                    if !say(line(&t)) {
                        return Ok(String::new());
                    }
                }
            }
            // Without history the stream is all there is.
            Err(CallError::Api { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let mut buffer = String::new();
    loop {
        let chunk = match stream.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(String::new()),
            Err(e) => return Err(CallError::Local(format!("the event stream broke: {e}"))),
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let mut name = "message";
            let mut data = String::new();
            for field in event.lines() {
                if let Some(value) = field.strip_prefix("event:") {
                    name = if value.trim() == "transition" {
                        "transition"
                    } else {
                        "other"
                    };
                } else if let Some(value) = field.strip_prefix("data:") {
                    data.push_str(value.trim_start());
                }
            }
            let Ok(value) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if name != "transition" {
                if value["missed"].is_number() {
                    eprintln!(
                        "warning: {} events missed (the terminal was too slow)",
                        value["missed"]
                    );
                }
                continue;
            }
            if seen.contains(&(cell(&value["at"]), cell(&value["to"]))) {
                continue;
            }
            if !say(line(&value)) {
                return Ok(String::new());
            }
        }
    }
}

/// `value` as the API's JSON or as YAML, or, for a table, what `table` makes of it.
fn shown(value: &Value, output: Output, table: impl FnOnce() -> String) -> String {
    match output {
        Output::Json => render::json(value),
        Output::Yaml => render::yaml(value),
        Output::Table | Output::Wide => table(),
    }
}

/// A ratio as a percentage with three decimals, `-` when unknown.
fn percent(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |r| format!("{:.3}%", r * 100.0))
}

/// Milliseconds as a duration (`5m`), `-` when absent.
fn millis(value: &Value) -> String {
    value.as_u64().map_or_else(
        || "-".to_owned(),
        |ms| humantime::format_duration(Duration::from_secs(ms / 1000)).to_string(),
    )
}

//! The page's HTML, written out from the model: every value from outside (ids, reasons,
//! details, maintenance reasons, member names, the filter) goes through [`escape`], in text
//! and attributes alike; a state is always said in words beside its colour.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use probe::TargetId;
use probe::graph::{Causes, Explanation, Export};
use probe::health::HealthState;

use super::super::badges::uptime_look;
use super::super::draw::escape;
use super::charts;
use super::incidents::{Incident, incidents};
use super::model::{
    Drawing, Filter, INCIDENT_TRANSITIONS, INCIDENTS_MS, Recorded, Row, SHOWN, Selection, Snapshot,
    UPTIME_WINDOWS, node_state,
};
use crate::history::TransitionRow;
use crate::history::rollup::DAY_MS;

/// The most incidents listed, newest first.
const MAX_INCIDENTS: usize = 10;

/// The most impacted nodes named per incident; the rest are counted.
const MAX_IMPACTED: usize = 10;

/// The most groups offered in the filter's list (a long one is typed, not picked).
const MAX_GROUP_CHOICES: usize = 500;

/// The page.
pub(super) fn page(
    snapshot: &Snapshot,
    selection: &Selection,
    filter: &Filter,
    recorded: &Recorded,
) -> String {
    let mut out = String::with_capacity(64 * 1024 + selection.rows.len() * 2048);
    out.push_str(concat!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">",
        "<meta name=\"color-scheme\" content=\"light dark\">",
        "<title>probe-engine status</title>",
        "<link rel=\"stylesheet\" href=\"/status/assets/page.css\">",
        "<script src=\"/status/assets/page.js\" defer></script>",
        "</head><body><header><h1>probe-engine status</h1><p class=\"meta\">",
    ));
    if let Some(member) = &snapshot.member {
        let _ = write!(
            out,
            "Cluster member <b>{}</b>; every target of the cluster, each with its owner. ",
            escape(member)
        );
    }
    let _ = write!(
        out,
        "As of <time datetime=\"{0}\">{0}</time> <span id=\"live\"></span></p></header><main>",
        clock(SystemTime::now())
    );
    overview(&mut out, snapshot, selection);
    match recorded {
        Recorded::Off => out.push_str(
            "<p class=\"notice\">No history is kept: uptimes, daily bars, latency and incidents \
             need one (the config says <code>history: false</code>, or the daemon runs with \
             <code>--state-dir none</code>).</p>",
        ),
        Recorded::Failed(why) => {
            let _ = write!(
                out,
                "<p class=\"notice\">The history could not be read: {}</p>",
                escape(why)
            );
        }
        Recorded::Kept(_) => {}
    }
    let recent = match recorded {
        Recorded::Kept(record) => Some((record.recent.as_slice(), &snapshot.export)),
        Recorded::Off | Recorded::Failed(_) => None,
    };
    recent_incidents(&mut out, recent);
    table(&mut out, selection, filter, recorded);
    graph(&mut out, &selection.drawing);
    // The side panel the script fills with an explanation.
    out.push_str("</main><aside id=\"explain\" aria-live=\"polite\" hidden></aside></body></html>");
    out
}

fn overview(out: &mut String, snapshot: &Snapshot, selection: &Selection) {
    out.push_str(
        "<section class=\"overview\" aria-labelledby=\"overview-h\"><h2 id=\"overview-h\">Overview</h2><ul class=\"counts\">",
    );
    for (state, count) in SHOWN.iter().zip(selection.counts) {
        let _ = write!(
            out,
            "<li data-state=\"{0}\"><span class=\"n\" id=\"count-{0}\">{count}</span> {0}</li>",
            state.as_str()
        );
    }
    out.push_str("</ul>");
    match &snapshot.not_ready {
        None => out.push_str("<p class=\"ready\" data-state=\"UP\"><b>Ready</b></p>"),
        Some(reason) => {
            let _ = write!(
                out,
                "<p class=\"ready\" data-state=\"DOWN\"><b>Not ready</b> {}</p>",
                escape(reason)
            );
        }
    }
    let _ = write!(
        out,
        "<p>{} targets, {} groups.</p></section>",
        selection.targets,
        selection.groups.len()
    );
}

/// The incidents section alone: what the page's script puts in place of the one it shows
/// once the history has written newer transitions (`GET /status/incidents`).
pub(super) fn incidents_section(recent: Option<(&[TransitionRow], &Export)>) -> String {
    let mut out = String::new();
    recent_incidents(&mut out, recent);
    out
}

/// The incidents grouped over the graph's edges from the history's transitions of the last
/// [`INCIDENTS_MS`] (`None` without a history to read them from).
fn recent_incidents(out: &mut String, recent: Option<(&[TransitionRow], &Export)>) {
    out.push_str(
        "<section id=\"incidents\" aria-labelledby=\"incidents-h\"><h2 id=\"incidents-h\">Incidents, last 24 hours</h2>",
    );
    let Some((recent, export)) = recent else {
        out.push_str("<p class=\"none\">Incidents come from the history.</p></section>");
        return;
    };
    let found = incidents(recent, export);
    if found.is_empty() {
        out.push_str("<p class=\"none\">No incidents.</p></section>");
        return;
    }
    out.push_str("<ol class=\"incidents\">");
    for incident in found.iter().take(MAX_INCIDENTS) {
        one_incident(out, incident);
    }
    out.push_str("</ol>");
    if found.len() > MAX_INCIDENTS {
        let _ = write!(
            out,
            "<p class=\"none\">And {} earlier.</p>",
            found.len() - MAX_INCIDENTS
        );
    }
    if recent.len() >= usize::try_from(INCIDENT_TRANSITIONS).unwrap_or(usize::MAX) {
        let _ = write!(
            out,
            "<p class=\"none\">Grouped from the latest {} transitions of the last {} hours only.</p>",
            recent.len(),
            INCIDENTS_MS / 3_600_000
        );
    }
    out.push_str("</section>");
}

fn one_incident(out: &mut String, incident: &Incident) {
    let worst = incident.worst.as_str();
    let _ = write!(
        out,
        "<li data-state=\"{worst}\"><b class=\"tag\">{worst}</b> <strong>{}</strong> from {}",
        escape(&incident.root),
        time_ms(incident.started_ms),
    );
    if !incident.impacted.is_empty() {
        let named: Vec<String> = incident
            .impacted
            .iter()
            .take(MAX_IMPACTED)
            .map(|id| escape(id))
            .collect();
        let _ = write!(out, "; impacted {}", named.join(", "));
        if incident.impacted.len() > MAX_IMPACTED {
            let _ = write!(out, " and {} more", incident.impacted.len() - MAX_IMPACTED);
        }
    }
    match incident.recovered_ms {
        Some(at) => {
            let lasted =
                Duration::from_secs(u64::try_from((at - incident.started_ms) / 1000).unwrap_or(0));
            let _ = write!(
                out,
                "; <span class=\"recovered\">recovered</span> at {} after {}</li>",
                time_ms(at),
                humantime::format_duration(lasted)
            );
        }
        None => out.push_str("; <span class=\"ongoing\">ongoing</span></li>"),
    }
}

fn table(out: &mut String, selection: &Selection, filter: &Filter, recorded: &Recorded) {
    out.push_str("<section aria-labelledby=\"rows-h\"><h2 id=\"rows-h\">Groups and targets</h2>");
    form(out, selection, filter);
    paging(out, selection, filter);
    out.push_str(concat!(
        "<div class=\"scroll\"><table class=\"rows\"><thead><tr><th scope=\"col\">Name</th>",
        "<th scope=\"col\">State</th><th scope=\"col\">Score</th>",
        "<th scope=\"col\">Up 24 h</th><th scope=\"col\">7 d</th><th scope=\"col\">30 d</th>",
        "<th scope=\"col\">Last 90 days</th><th scope=\"col\">p50, 48 h</th>",
        "<th scope=\"col\">Why</th></tr></thead><tbody>",
    ));
    for row in &selection.rows {
        one_row(out, row, recorded);
    }
    if selection.rows.is_empty() {
        out.push_str("<tr><td colspan=\"9\" class=\"none\">Nothing matches.</td></tr>");
    }
    out.push_str("</tbody></table></div>");
    paging(out, selection, filter);
    out.push_str("</section>");
}

/// The filter: a GET form, so it works without scripts.
fn form(out: &mut String, selection: &Selection, filter: &Filter) {
    let _ = write!(
        out,
        concat!(
            "<form class=\"filter\" method=\"get\" action=\"/status\" role=\"search\">",
            "<label>Search <input type=\"search\" name=\"q\" value=\"{q}\" placeholder=\"id or reason\"></label> ",
            "<label>State <select name=\"state\"><option value=\"\">any</option>",
        ),
        q = escape(filter.text.as_deref().unwrap_or_default()),
    );
    for state in SHOWN {
        let _ = write!(
            out,
            "<option{}>{}</option>",
            if filter.state == Some(state) {
                " selected"
            } else {
                ""
            },
            state.as_str()
        );
    }
    let _ = write!(
        out,
        concat!(
            "</select></label> <label>Depended on by <input name=\"group\" list=\"groups\" ",
            "value=\"{}\" placeholder=\"group id\" size=\"16\"></label><datalist id=\"groups\">",
        ),
        escape(filter.group.as_ref().map_or("", TargetId::as_str)),
    );
    for group in selection.groups.iter().take(MAX_GROUP_CHOICES) {
        let _ = write!(out, "<option value=\"{}\">", escape(group.as_str()));
    }
    out.push_str("</datalist> <button type=\"submit\">Filter</button>");
    if filter.any() {
        out.push_str(" <a href=\"/status\">Clear</a>");
    }
    out.push_str("</form>");
}

fn paging(out: &mut String, selection: &Selection, filter: &Filter) {
    let (first, last) = match selection.rows.len() {
        0 => (0, 0),
        n => (selection.offset + 1, selection.offset + n),
    };
    out.push_str("<nav class=\"paging\" aria-label=\"pages\">");
    if selection.page > 1 {
        let _ = write!(
            out,
            "<a rel=\"prev\" href=\"{}\">‹ Previous</a> ",
            escape(&filter.href(selection.page - 1))
        );
    }
    let _ = write!(
        out,
        "<span>Rows {first}–{last} of {}, page {} of {}</span>",
        selection.matched, selection.page, selection.pages
    );
    if selection.page < selection.pages {
        let _ = write!(
            out,
            " <a rel=\"next\" href=\"{}\">Next ›</a>",
            escape(&filter.href(selection.page + 1))
        );
    }
    out.push_str("</nav>");
}

fn one_row(out: &mut String, row: &Row, recorded: &Recorded) {
    let id = escape(row.id.as_str());
    let state = row.state.as_str();
    let _ = write!(
        out,
        "<tr data-id=\"{id}\" data-state=\"{state}\" class=\"{}\"><th scope=\"row\">{id}",
        if row.group { "group" } else { "target" }
    );
    if row.group {
        out.push_str(" <small>group</small>");
    }
    if let Some(owner) = &row.owner {
        let _ = write!(out, " <small>by {}</small>", escape(owner));
    }
    out.push_str("</th><td class=\"state\"");
    if let Some(since) = row.since {
        let _ = write!(out, " title=\"since {}\"", clock(since));
    }
    let _ = write!(out, "><b>{state}</b>");
    if row.flapping {
        out.push_str(
            " <span class=\"flap\" title=\"flapping: held in PROBING until it settles\">⚑ flapping</span>",
        );
    }
    let _ = write!(
        out,
        "</td><td class=\"num score\">{}</td>",
        score(row.score)
    );
    match recorded {
        Recorded::Kept(record) => {
            for window in &record.uptimes {
                let ratio = window.get(row.id.as_str()).and_then(|u| u.ratio());
                let (words, _) = uptime_look(ratio);
                let _ = write!(out, "<td class=\"num\">{words}</td>");
            }
            let days = record
                .days
                .get(row.id.as_str())
                .map_or(&[][..], Vec::as_slice);
            out.push_str("<td>");
            charts::days_bar(out, days, record.now_ms.div_euclid(DAY_MS));
            out.push_str("</td><td>");
            charts::sparkline(out, days, record.now_ms);
            out.push_str("</td>");
        }
        Recorded::Off | Recorded::Failed(_) => {
            for _ in 0..UPTIME_WINDOWS.len() + 2 {
                out.push_str("<td class=\"none\">–</td>");
            }
        }
    }
    out.push_str("<td class=\"why\">");
    if let Some(m) = &row.maintenance {
        let _ = write!(
            out,
            "<p class=\"maint\"><b>Maintenance</b> until {}: {}</p>",
            clock(m.until),
            escape(&m.reason)
        );
    }
    if !row.roots.is_empty() {
        let _ = write!(
            out,
            "<p class=\"cause\">{}</p>",
            because(row.state, &row.roots)
        );
    }
    match &row.reason {
        Some(reason) if reason.current => {
            let _ = write!(out, "<p class=\"reason\">{}</p>", escape(&reason.text));
        }
        Some(reason) => {
            let _ = write!(
                out,
                "<p class=\"reason old\">Last failure: {}</p>",
                escape(&reason.text)
            );
        }
        // An element for the live updates to fill.
        None if !row.group => out.push_str("<p class=\"reason\"></p>"),
        None => {}
    }
    out.push_str("</td></tr>");
}

/// `DOWN because orders-db is DOWN`, or for a node still up itself, what is down under it.
fn because(state: HealthState, roots: &[TargetId]) -> String {
    let names: Vec<String> = roots.iter().map(|r| escape(r.as_str())).collect();
    let verb = if names.len() == 1 { "is" } else { "are" };
    if state == HealthState::Down {
        format!("DOWN because {} {verb} DOWN", names.join(", "))
    } else {
        format!("Critical dependency {} {verb} DOWN", names.join(", "))
    }
}

fn graph(out: &mut String, drawing: &Drawing) {
    out.push_str("<section aria-labelledby=\"graph-h\"><h2 id=\"graph-h\">Dependency graph</h2>");
    match drawing {
        Drawing::Whole(svg) => {
            let _ = write!(out, "<div class=\"graph\">{svg}");
        }
        Drawing::Part(group, svg) => {
            let _ = write!(
                out,
                "<p>{} and what it depends on.</p><div class=\"graph\">{svg}",
                escape(group.as_str())
            );
        }
        Drawing::TooLarge(nodes) => {
            let _ = write!(
                out,
                concat!(
                    "<p>{} nodes are too many to draw here: filter by a group to draw its part, ",
                    "or open <a href=\"/v1/graph?format=svg\">the whole graph</a>.</p></section>",
                ),
                nodes
            );
            return;
        }
    }
    out.push_str(
        "</div><p class=\"hint\" hidden>Select a node, or a name in the table, to see why it \
         scores what it does.</p></section>",
    );
}

/// The side panel's explanation of a node: its summary, its root causes, what it takes down,
/// and each dependency's part.
pub(super) fn explanation(explanation: &Explanation, causes: &Causes) -> String {
    let node = &explanation.node;
    let mut out = String::with_capacity(1024);
    let state = node_state(node);
    let _ = write!(
        out,
        "<h3 data-state=\"{0}\">{1} <b class=\"tag\">{0}</b></h3><p class=\"summary\">{2}</p>",
        state.as_str(),
        escape(node.id.as_str()),
        escape(&explanation.to_string()),
    );
    if let Some(roots) = causes.roots.get(&node.id) {
        let roots: Vec<TargetId> = roots.iter().cloned().collect();
        let _ = write!(out, "<p class=\"cause\">{}</p>", because(state, &roots));
    }
    if let Some(impacts) = causes.impacts.get(&node.id) {
        let names: Vec<String> = impacts.iter().map(|i| escape(i.as_str())).collect();
        let _ = write!(out, "<p>Takes down {}.</p>", names.join(", "));
    }
    if explanation.children.is_empty() {
        out.push_str("<p>No dependencies.</p>");
        return out;
    }
    out.push_str(concat!(
        "<table><thead><tr><th scope=\"col\">Dependency</th><th scope=\"col\">State</th>",
        "<th scope=\"col\">Score</th><th scope=\"col\">Weight</th><th scope=\"col\"></th></tr></thead><tbody>",
    ));
    for child in &explanation.children {
        let state = node_state(&child.node);
        let mut marks = Vec::new();
        if child.critical {
            marks.push("critical");
        }
        if child.caps {
            marks.push("caps the score");
        }
        let _ = write!(
            out,
            concat!(
                "<tr data-state=\"{0}\"><th scope=\"row\">{1}</th><td class=\"state\"><b>{0}</b></td>",
                "<td class=\"num\">{2}</td><td class=\"num\">{3:.2}</td><td>{4}</td></tr>",
            ),
            state.as_str(),
            escape(child.node.id.as_str()),
            score(child.node.score),
            child.weight,
            marks.join(", "),
        );
    }
    out.push_str("</tbody></table>");
    out
}

pub(super) fn score(score: Option<f64>) -> String {
    score.map_or_else(|| "–".to_owned(), |s| format!("{s:.2}"))
}

/// A wall-clock time, to the second.
fn clock(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A time in Unix milliseconds, as a `<time>` element.
fn time_ms(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    format!("<time datetime=\"{0}\">{0}</time>", clock(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_names_its_roots_escaped() {
        let roots = [TargetId::new("orders-db").unwrap()];
        assert_eq!(
            because(HealthState::Down, &roots),
            "DOWN because orders-db is DOWN"
        );
        let two = [TargetId::new("a").unwrap(), TargetId::new("b").unwrap()];
        assert_eq!(
            because(HealthState::Up, &two),
            "Critical dependency a, b are DOWN"
        );
    }
}

// The status page's script: what it adds to a page that is complete without it.
// - Live updates: each `transition` of /status/events sets its row's state (words, colour,
//   data-state) and, for a target, moves the overview's counts (which count targets), without
//   a reload; each `nodes` event sets the scores that moved, the groups' verdicts with them,
//   and the words and colour of the graph's nodes; each `incidents` event (the history has written newer
//   transitions) puts /status/incidents in place of the incidents section, one fetch at a
//   time.
// - Explanations: selecting a node of the graph (or a row's name) shows why it scores what it
//   does in the side panel, from /status/explain/{id}.
// Same origin only (the page's Content-Security-Policy allows nothing else); every value from
// an event is set as text, never as markup. The panel's and the incidents' markup is the
// server's, escaped there.
'use strict';

(() => {
  const live = document.getElementById('live');
  const panel = document.getElementById('explain');

  const count = (state, by) => {
    const n = document.getElementById('count-' + state);
    if (n) n.textContent = String(Number(n.textContent) + by);
  };

  const rowOf = (id) => document.querySelector('tr[data-id="' + CSS.escape(id) + '"]');

  const setState = (row, state) => {
    row.dataset.state = state;
    row.querySelector('.state b').textContent = state;
  };

  const onTransition = (event) => {
    const t = JSON.parse(event.data);
    if (t.kind === 'target') {
      count(t.from, -1);
      count(t.to, 1);
    }
    const row = rowOf(t.target);
    if (!row) return;
    setState(row, t.to);
    row.querySelector('.state').title = 'since ' + t.at;
    const reason = row.querySelector('.reason');
    if (reason && t.detail) {
      reason.textContent = t.detail;
      reason.classList.remove('old');
    }
  };

  const onNodes = (event) => {
    for (const n of JSON.parse(event.data)) {
      const row = rowOf(n.id);
      if (row) {
        if (n.state) setState(row, n.state);
        const score = row.querySelector('.score');
        if (score) score.textContent = n.score;
      }
      const node = document.querySelector('svg g.node[data-id="' + CSS.escape(n.id) + '"]');
      if (node) {
        node.querySelector('rect').setAttribute('fill', n.colour);
        const words = node.querySelectorAll('text')[1];
        if (words) words.textContent = n.label;
      }
    }
  };

  // One fetch at a time; an event during one asks for one more after it.
  let fetching = false;
  let again = false;
  const onIncidents = async () => {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      do {
        again = false;
        const answer = await fetch('/status/incidents');
        if (!answer.ok) break;
        const html = await answer.text();
        const shown = document.getElementById('incidents');
        if (shown) shown.outerHTML = html;
      } while (again);
    } catch (e) {
      // The next event tries again.
    } finally {
      fetching = false;
    }
  };

  const source = new EventSource('/status/events');
  source.addEventListener('open', () => { live.textContent = '· live'; });
  source.addEventListener('error', () => { live.textContent = '· reconnecting'; });
  source.addEventListener('transition', onTransition);
  source.addEventListener('nodes', onNodes);
  source.addEventListener('incidents', onIncidents);
  source.addEventListener('lagged', () => {
    live.textContent = '· missed updates: reload for the latest';
  });

  const close = () => { panel.hidden = true; };
  const explain = async (id) => {
    const shut = document.createElement('button');
    shut.type = 'button';
    shut.className = 'close';
    shut.textContent = 'Close';
    shut.addEventListener('click', close);
    const body = document.createElement('div');
    body.textContent = 'Loading ' + id + '…';
    panel.replaceChildren(shut, body);
    panel.hidden = false;
    try {
      const answer = await fetch('/status/explain/' + encodeURIComponent(id));
      if (!answer.ok) throw new Error(answer.status + ' ' + answer.statusText);
      body.innerHTML = await answer.text();
    } catch (e) {
      body.textContent = 'No explanation of ' + id + ': ' + e.message;
    }
  };

  // Graph nodes and row names: selectable by pointer and keyboard.
  const selectable = document.querySelectorAll('svg .node[data-id], tr[data-id] > th');
  for (const el of selectable) {
    el.tabIndex = 0;
    el.setAttribute('role', 'button');
    el.classList.add('selectable');
  }
  const idOf = (target) => {
    const el = target.closest('.selectable');
    return el && (el.dataset.id || el.parentElement.dataset.id);
  };
  document.addEventListener('click', (e) => {
    const id = idOf(e.target);
    if (id) explain(id);
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') return close();
    if (e.key !== 'Enter' && e.key !== ' ') return;
    const id = idOf(e.target);
    if (id) {
      e.preventDefault();
      explain(id);
    }
  });
  for (const hint of document.querySelectorAll('.hint')) hint.hidden = false;
})();

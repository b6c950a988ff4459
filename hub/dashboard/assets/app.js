// Flotilla's dashboard page. Every value from the hub is rendered as text (el() never parses
// markup); the server's content policy runs this file and nothing inline.
'use strict';

const app = { session: null, source: null, route: null, view: null, timer: null };

// el builds an element: attrs are properties or attributes, children strings or nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const $ = (id) => document.getElementById(id);

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

// Routes: #/NS, #/NS/bundle/NAME, #/NS/cluster/NAME, #/NS/diff/BUNDLE/CLUSTER/FROM/TO, with
// ?page=&state= for a bundle's cluster table.
function parseRoute() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || '');
  const ns = parts[0] || app.session.namespace;
  const r = { ns, view: 'fleet', name: '', params };
  if (parts[1] === 'bundle' || parts[1] === 'cluster') { r.view = parts[1]; r.name = parts[2] || ''; }
  if (parts[1] === 'diff') { r.view = 'diff'; r.name = parts[2]; r.cluster = parts[3]; r.from = parts[4]; r.to = parts[5]; }
  return r;
}

function href(ns, ...rest) {
  return '#/' + [ns, ...rest].map(encodeURIComponent).join('/');
}

function viewQuery(r) {
  const q = new URLSearchParams({ view: r.view, namespace: r.ns, name: r.name || '' });
  if (r.params.get('page')) q.set('page', r.params.get('page'));
  if (r.params.get('state')) q.set('state', r.params.get('state'));
  if (r.view === 'diff') { q.set('cluster', r.cluster); q.set('from', r.from); q.set('to', r.to); }
  return q.toString();
}

// connect follows a route: the stream pushes its view whenever it changed; EventSource
// reconnects by itself when the connection drops.
function connect() {
  const r = parseRoute();
  app.route = r;
  $('ns-input').value = r.ns;
  if (app.source) { app.source.close(); app.source = null; }
  crumbs(r);
  if (r.view === 'diff') { loadOnce(r); return; }
  const src = new EventSource('/api/stream?' + viewQuery(r));
  app.source = src;
  src.addEventListener('view', (ev) => {
    // Measured (performance entries "flotilla:view"): what a push costs the page, and when the
    // first one was drawn.
    const start = performance.now();
    live(true);
    render(JSON.parse(ev.data));
    if (performance.getEntriesByName('flotilla:view').length >= 1000) performance.clearMeasures('flotilla:view');
    performance.measure('flotilla:view', { start });
  });
  src.addEventListener('problem', (ev) => { live(true); problem(JSON.parse(ev.data)); });
  src.onopen = () => live(true);
  src.onerror = () => live(false);
}

async function loadOnce(r) {
  const resp = await fetch('/api/view?' + viewQuery(r), { credentials: 'same-origin' });
  const body = await resp.json();
  live(true, 'loaded');
  if (!resp.ok) problem(body); else render(body);
}

function live(on, text) {
  const l = $('live');
  l.className = 'live ' + (on ? 'on' : 'off');
  l.textContent = text || (on ? 'live' : 'reconnecting…');
}

function crumbs(r) {
  const c = $('crumbs');
  c.replaceChildren(el('a', { href: href(r.ns) }, r.ns));
  if (r.view !== 'fleet') c.append('›', el('span', {}, r.view + ' ' + (r.name || '')));
  if (r.view === 'diff') c.append('›', el('span', {}, `${r.cluster}: ${r.from} → ${r.to}`));
}

function problem(err) {
  const main = $('main');
  main.replaceChildren(el('h1', {}, 'Cannot show this'), el('p', { class: 'banner err', 'data-problem': err.reason || 'error' }, err.error));
}

function banners(v) {
  const b = $('banners');
  b.replaceChildren();
  if (v.olderHub) b.append(el('div', { class: 'banner warn', 'data-banner': 'older-hub' }, v.olderHub));
  if (v.stale) b.append(el('div', { class: 'banner err' }, 'The hub cannot be watched right now; this page may be out of date: ' + v.stale));
  for (const r of v.refused || []) b.append(el('div', { class: 'banner warn', 'data-banner': 'refused' }, 'Not shown, your access does not allow it: ' + r));
}

function render(v) {
  app.view = v;
  banners(v);
  const main = $('main');
  const focus = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
  let content;
  switch (v.view) {
    case 'fleet': content = fleet(v); break;
    case 'bundle': content = bundle(v); break;
    case 'cluster': content = cluster(v); break;
    case 'diff': content = diff(v); break;
    default: content = el('p', {}, 'unknown view');
  }
  main.replaceChildren(...content);
  if (focus) {
    const again = main.querySelector(`[data-key="${CSS.escape(focus)}"]`);
    if (again) again.focus();
  }
  tick();
}

// Countdowns count down between pushes, from the server's clock.
function tick() {
  if (!app.view) return;
  const skew = Date.parse(app.view.now) - Date.now();
  for (const e of document.querySelectorAll('[data-until]')) {
    const left = Math.max(0, Date.parse(e.dataset.until) - (Date.now() + skew));
    e.textContent = left === 0 ? 'now' : 'in ' + duration(left);
  }
}

function duration(ms) {
  let s = Math.round(ms / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return [d && d + 'd', h && h + 'h', m && m + 'm', (!d && !h) && s + 's'].filter(Boolean).join(' ');
}

function time(t) {
  if (!t) return '';
  const d = new Date(t);
  return el('time', { datetime: t, title: d.toISOString() }, d.toLocaleString());
}

function stateText(s) { return el('span', { class: 'state' }, s || '—'); }

function chip(ns, c) {
  const label = `${c.name}: ${c.chip}${c.detail ? ' (' + c.detail + ')' : ''}`;
  return el('a', { class: 'chip c-' + c.chip, href: href(ns, 'cluster', c.name), title: label, 'aria-label': label, 'data-cluster': c.name, 'data-chip': c.chip }, c.name);
}

function counts(map) {
  const order = ['failed', 'notready', 'offline', 'rolledback', 'paused', 'modified', 'released', 'applied', 'pending', 'skipped', 'ready'];
  return el('div', { class: 'counts' }, order.filter((k) => map && map[k]).map((k) => el('span', { class: 'count c-' + k, 'data-count': k }, `${map[k]} ${k}`)));
}

function card(n, label, attrs) { return el('div', Object.assign({ class: 'card' }, attrs || {}), el('span', { class: 'n' }, n), label); }

// ---- fleet
function fleet(v) {
  const ns = v.namespace;
  const cl = v.clusters || {};
  const out = [el('h1', {}, 'Fleet ', el('span', { class: 'muted' }, ns))];
  out.push(el('div', { class: 'cards' },
    card(v.gitRepos.length, 'GitRepos'),
    card(v.bundles.items.length, 'bundles'),
    card(cl.total || 0, 'clusters'),
    card(cl.online || 0, 'online', { 'data-clusters': 'online' }),
    card(cl.offline || 0, 'offline', { 'data-clusters': 'offline' }),
    card(cl.paused || 0, 'paused', { 'data-clusters': 'paused' })));
  out.push(el('h2', {}, 'GitRepos'));
  out.push(el('table', {}, el('thead', {}, el('tr', {}, ['GitRepo', 'Commit', 'State', 'Ready', 'Why'].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, v.gitRepos.map((g) => el('tr', { 'data-gitrepo': g.name },
      el('td', {}, el('strong', {}, g.name), el('div', { class: 'muted' }, g.repo)),
      el('td', {}, (g.commit || '').slice(0, 12)),
      el('td', {}, stateText(g.state), g.paused ? ' (paused)' : ''),
      el('td', {}, g.ready || ''),
      el('td', {}, g.problems && g.problems.length ? el('ul', { class: 'problems' }, g.problems.map((p) => el('li', {}, p))) : ''))))));
  const byState = Object.entries(v.bundles.byState || {});
  out.push(el('h2', {}, 'Bundles'), el('div', { class: 'cards' }, byState.map(([s, n]) => card(n, s, { 'data-bundle-state': s }))));
  out.push(el('table', {}, el('thead', {}, el('tr', {}, ['Bundle', 'GitRepo', 'Rollout', 'Revision', 'State', 'Ready', 'Now'].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, v.bundles.items.map((b) => el('tr', { 'data-bundle': b.name },
      el('td', {}, el('a', { href: href(ns, 'bundle', b.name) }, b.name), b.paused ? ' (paused)' : ''),
      el('td', {}, b.gitRepo || ''), el('td', {}, b.strategy), el('td', {}, b.revision),
      el('td', {}, stateText(b.state)), el('td', {}, b.ready || ''), el('td', { class: 'muted' }, b.message || ''))))));
  out.push(el('h2', {}, 'Clusters'));
  const groups = [];
  // countsTable is one way of cutting the fleet: a row of counts per label value or group.
  const countsTable = (title, rows) => el('div', {}, el('h3', {}, title), el('table', {}, el('tbody', {}, rows.map((x) => el('tr', {},
    el('th', { scope: 'row' }, x.name), el('td', {}, plural(x.total, 'cluster')), el('td', {}, `${x.online} online`), el('td', {}, `${x.offline} offline`), el('td', {}, `${x.paused} paused`))))));
  for (const l of cl.byLabel || []) groups.push(countsTable('by ' + l.key, l.values));
  if ((cl.byGroup || []).length) groups.push(countsTable('by group', cl.byGroup));
  out.push(el('div', { class: 'grid2' }, groups));
  if ((cl.offline || 0) > 0) {
    out.push(el('h3', {}, 'Offline'), el('div', { class: 'chips' }, (cl.offlineNames || []).map((n) => el('a', { class: 'chip c-offline', href: href(ns, 'cluster', n), 'data-cluster': n, 'data-chip': 'offline' }, n))));
  }
  return out;
}

// ---- bundle
function bundle(v) {
  const ns = v.namespace;
  const out = [el('h1', {}, 'Bundle ', v.name, ' ', el('span', { class: 'muted' }, `revision ${v.revision}`))];
  out.push(el('p', {}, stateText(v.state), ' ', v.ready || '', ' · ', v.strategy, v.gitRepo ? ` · GitRepo ${v.gitRepo} (${v.path || '.'})` : '', v.commit ? ` · commit ${v.commit.slice(0, 12)}` : ''));
  if (v.waiting) out.push(el('p', { class: 'banner warn', 'data-waiting': '' }, 'Waiting: ' + v.waiting));
  else if (v.doing) out.push(el('p', { class: 'muted' }, 'Now: ' + v.doing));
  for (const w of v.warnings || []) out.push(el('p', { class: 'banner warn' }, 'Warning: ' + w));
  const eta = [];
  if (v.eta) eta.push(el('span', {}, `${v.eta.label} `, el('span', { class: 'countdown', 'data-until': v.eta.until }, '')));
  if (v.approvals) eta.push(el('span', {}, `${eta.length ? ' · ' : ''}${v.approvals === 1 ? 'an approval gate still needs' : v.approvals + ' approval gates still need'} people`));
  if (eta.length) out.push(el('p', { 'data-eta': '' }, 'Ahead: ', eta));
  out.push(counts(v.counts));
  out.push(bundleToolbar(v));
  out.push(outcome(v));
  if ((v.runs || []).length) out.push(runs(v));
  out.push(el('h2', {}, 'Rollout'));
  for (const l of v.lanes) out.push(lane(v, l));
  out.push(table(v));
  out.push(compare(v));
  out.push(el('h2', {}, 'Events'), timeline(v.events));
  return out;
}

function bundleToolbar(v) {
  const t = el('div', { class: 'toolbar' });
  if (v.paused) t.append(action('Resume rollout', { action: 'resume-bundle', bundle: v.name }, `Resume the rollout of ${v.name}: it releases again.`));
  else t.append(action('Pause rollout', { action: 'pause-bundle', bundle: v.name }, `Pause the rollout of ${v.name}: new revisions are staged, none released (R1.13).`));
  const older = (v.revisions || []).filter((r) => r.deployable && r.index !== v.revision);
  if (older.length && v.strategy !== 'sequence') {
    t.append(el('button', { 'data-action': 'rollback', onclick: () => confirmAction({
      title: 'Roll back ' + v.name,
      text: 'Deploy an older revision again, exactly as it was rendered. The next commit ends the rollback.',
      extra: () => el('label', {}, 'Revision ', el('select', { id: 'f-revision' }, older.map((r) => el('option', { value: r.index }, `${r.index} (${(r.commit || '').slice(0, 12)})`)))),
      body: () => ({ action: 'rollback', bundle: v.name, revision: Number($('f-revision').value) }),
    }) }, 'Roll back…'));
  }
  return t;
}

function outcome(v) {
  const box = el('div', { 'data-outcome': v.outcome ? v.outcome.outcome : '' });
  const o = v.outcome;
  if (o && o.rule) {
    box.className = 'outcome';
    box.append(el('h2', {}, `Revision ${o.revision}: ${o.what}`),
      el('p', {}, 'Rule ', el('strong', {}, o.rule), ': ', o.message || ''),
      el('p', {}, 'Failing clusters: ', el('span', { class: 'chips' }, (o.clusters || []).map((c) => el('a', { class: 'chip c-failed', href: href(v.namespace, 'cluster', c), 'data-cluster': c }, c)))));
  }
  for (const q of v.quarantined || []) {
    box.append(el('div', { class: 'gate', 'data-quarantined': q.revision },
      el('span', {}, `Revision ${q.revision} is quarantined since `, time(q.since), q.message ? ': ' + q.message : ''),
      el('code', {}, q.retry),
      action(`Retry revision ${q.revision}`, { action: 'retry', bundle: v.name, revision: q.revision }, `Roll revision ${q.revision} out again under the bundle's strategy (R5.5).`)));
  }
  return box;
}

function runs(v) {
  return el('div', {}, el('h2', {}, 'Staged runs'), el('table', {}, el('thead', {}, el('tr', {}, ['Run', 'Revision', 'Requested', 'State', 'Message', ''].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, v.runs.map((r) => el('tr', { 'data-run': r.name },
      el('td', {}, r.name, r.current ? el('strong', {}, ' (current)') : ''), el('td', {}, r.revision || ''), el('td', {}, r.requested), el('td', {}, stateText(r.state)),
      el('td', { class: 'muted' }, r.message || ''),
      el('td', {}, r.requested === 'Run'
        ? action('Stop', { action: 'stop-run', run: r.name }, `Stop run ${r.name}: clusters in flight finish, nothing new starts.`)
        : action('Start', { action: 'start-run', run: r.name }, `Set run ${r.name} running.`)))))));
}

function lane(v, l) {
  const ns = v.namespace;
  const head = el('header', {}, el('span', { class: 'name' }, `${l.kind} ${l.name}`), stateText(l.state), el('span', { class: 'muted' }, plural(l.total, 'cluster')));
  if (l.budget) head.append(el('span', { class: 'muted' }, `${l.budget.unavailable} unavailable (max ${l.budget.maxUnavailable})`));
  if (l.countdown) head.append(el('span', {}, l.countdown.label + ' ', el('span', { class: 'countdown', 'data-until': l.countdown.until }, '')));
  if (l.reason) head.append(el('span', { class: 'reason', 'data-reason': '' }, l.reason));
  const box = el('section', { class: 'lane', 'data-lane': l.name, 'aria-label': `${l.kind} ${l.name}` }, head, counts(l.counts),
    el('div', { class: 'chips' }, l.clusters.map((c) => chip(ns, c))));
  if (l.more) box.append(el('a', { href: href(ns, 'bundle', v.name) + '?state=' }, `and ${l.more} more in the table below`));
  for (const g of l.gates || []) box.append(gate(v, g));
  if (l.kind === 'stage' && v.runs && v.runs.some((r) => r.current) && !['Completed', 'Skipped'].includes(l.state)) {
    const run = v.runs.find((r) => r.current).name;
    box.append(el('div', { class: 'toolbar' }, action(l.group ? 'Skip group' : 'Skip stage', { action: 'skip', run, stage: l.stage, group: l.group || '' }, `Skip ${l.name} in run ${run} (R3.11).`)));
  }
  return box;
}

function gate(v, g) {
  const where = `${g.after ? 'after' : 'before'} ${g.group ? 'group ' + g.group + ' of ' : ''}stage ${g.stage}`;
  const box = el('div', { class: 'gate', 'data-gate': `${g.stage}/${g.group || ''}/${g.after ? 'after' : 'before'}`, 'data-gate-state': g.state },
    el('strong', {}, `Approval ${where}`), stateText(g.state),
    el('span', { 'data-quorum': '' }, `${(g.approvals || []).length}/${g.quorum} approvals${(g.approvals || []).length ? ': ' + g.approvals.join(', ') : ''}`));
  if (g.rejected) box.append(el('span', { class: 'muted' }, 'rejected by ' + g.rejected));
  const open = !g.rejected && !['Completed', 'Skipped'].includes(g.state);
  if (open) {
    const base = { run: g.run, stage: g.stage, group: g.group || '', after: !!g.after };
    // A gate is approved or rejected on its ApprovalRequest, which the run makes when it
    // reaches the gate; it can be skipped ahead of that.
    if (!g.request) box.append(el('span', { class: 'muted' }, 'not reached yet'));
    else box.append(
      el('button', { class: 'primary', 'data-action': 'approve', onclick: () => confirmAction({
        title: 'Approve the gate ' + where, text: `You approve as ${app.session.user}. Run ${g.run}.`,
        extra: () => el('label', {}, 'Comment ', el('input', { id: 'f-comment' })),
        body: () => Object.assign({ action: 'approve', comment: $('f-comment').value }, base),
      }) }, 'Approve…'),
      el('button', { class: 'danger', 'data-action': 'reject', onclick: () => confirmAction({
        title: 'Reject the gate ' + where, text: 'The run stops for good.',
        extra: () => el('label', {}, 'Reason (required) ', el('textarea', { id: 'f-comment', required: true })),
        body: () => Object.assign({ action: 'reject', comment: $('f-comment').value }, base),
      }) }, 'Reject…'));
    box.append(action('Skip gate', Object.assign({ action: 'skip', gate: g.after ? 'After' : 'Before' }, base), `Skip the gate ${where} (R3.11).`));
  }
  return box;
}

function table(v) {
  const t = v.table;
  const ns = v.namespace;
  const states = ['', 'failed', 'notready', 'offline', 'rolledback', 'paused', 'modified', 'released', 'applied', 'pending', 'skipped', 'ready'];
  const go = (page, state) => { location.hash = href(ns, 'bundle', v.name) + '?' + new URLSearchParams({ page, state }).toString(); };
  return el('div', {}, el('h2', {}, 'Clusters'),
    el('div', { class: 'pager' },
      el('label', {}, 'Show ', el('select', { 'data-key': 'state-filter', onchange: (e) => go(0, e.target.value) }, states.map((s) => el('option', { value: s, selected: s === (t.state || '') }, s || 'all')))),
      el('button', { disabled: t.page === 0, onclick: () => go(t.page - 1, t.state || '') }, '‹ previous'),
      el('span', {}, `page ${t.page + 1} of ${t.pages} (${plural(t.total, 'cluster')})`),
      el('button', { disabled: t.page + 1 >= t.pages, onclick: () => go(t.page + 1, t.state || '') }, 'next ›')),
    el('table', { 'data-table': '' }, el('thead', {}, el('tr', {}, ['Cluster', 'State', 'Staged', 'Applied', 'Detail'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, t.rows.map((c) => el('tr', { 'data-row': c.name }, el('td', {}, chip(ns, c)), el('td', {}, c.chip), el('td', {}, c.staged), el('td', {}, c.applied), el('td', { class: 'muted' }, c.detail || ''))))));
}

function compare(v) {
  const revs = (v.revisions || []).filter((r) => r.deployable);
  if (revs.length < 1) return el('div');
  const sel = (id, def) => el('select', { id }, revs.map((r) => el('option', { value: r.index, selected: r.index === def }, String(r.index))));
  const first = v.table.rows[0] ? v.table.rows[0].name : '';
  return el('form', { class: 'toolbar', 'data-compare': '', onsubmit: (e) => {
    e.preventDefault();
    location.hash = href(v.namespace, 'diff', v.name, $('f-cluster').value, $('f-from').value, $('f-to').value);
  } }, el('h2', {}, 'What a revision changes'),
  el('label', {}, 'Cluster ', el('input', { id: 'f-cluster', value: first, required: true })),
  el('label', {}, 'from ', sel('f-from', revs.length > 1 ? revs[revs.length - 2].index : revs[0].index)),
  el('label', {}, 'to ', sel('f-to', revs[revs.length - 1].index)),
  el('button', { type: 'submit' }, 'Compare'));
}

function timeline(events) {
  if (!events || !events.length) return el('p', { class: 'muted' }, 'No events.');
  return el('ol', { class: 'timeline' }, events.map((e) => el('li', { class: e.type, 'data-event': e.reason },
    time(e.time), el('strong', {}, e.reason), ' ', el('span', { class: 'muted' }, e.object), e.count > 1 ? ` ×${e.count}` : '', el('div', {}, e.note))));
}

// ---- cluster
function cluster(v) {
  const ns = v.namespace;
  const out = [el('h1', {}, 'Cluster ', v.name)];
  out.push(el('p', { 'data-online': String(v.online) }, stateText(v.online ? 'online' : 'offline'), v.paused ? ' · paused' : '', ' · agent ', v.agentVersion || 'unknown',
    v.olderAgent ? el('strong', {}, ' (older than the hub)') : '', ' · last heartbeat ', v.heartbeat ? time(v.heartbeat) : 'never'));
  if (v.message) out.push(el('p', { class: 'muted' }, v.message));
  out.push(el('div', { class: 'toolbar' }, v.paused
    ? action('Resume cluster', { action: 'resume-cluster', cluster: v.name }, `Resume ${v.name}: it takes releases again.`)
    : action('Pause cluster', { action: 'pause-cluster', cluster: v.name }, `Pause ${v.name}: it keeps its revisions while others move on (R1.13).`)));
  out.push(el('p', { class: 'muted' }, 'Labels: ', Object.entries(v.labels || {}).map(([k, x]) => `${k}=${x}`).join(', ')));
  out.push(el('h2', {}, 'Deployments'), el('table', {}, el('thead', {}, el('tr', {}, ['Bundle', 'State', 'Staged', 'Released', 'Applied', 'Detail'].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, v.deployments.map((d) => el('tr', { 'data-deployment': d.bundle },
      el('td', {}, el('a', { href: href(ns, 'bundle', d.bundle) }, d.bundle)), el('td', {}, el('span', { class: 'chip c-' + d.chip }, d.chip)),
      el('td', {}, d.staged), el('td', {}, d.released || '—'), el('td', {}, d.applied), el('td', { class: 'muted' }, d.detail || ''))))));
  out.push(el('h2', {}, 'Events'));
  if (v.eventsNote) out.push(el('p', { class: 'muted' }, v.eventsNote));
  out.push(timeline(v.events));
  return out;
}

// ---- diff
function diff(v) {
  const out = [el('h1', {}, `${v.bundle} on ${v.cluster}: revision ${v.from} → ${v.to}`)];
  const changed = v.objects.filter((o) => o.change !== 'unchanged');
  out.push(el('p', {}, `${changed.length} of ${v.objects.length} objects change.`, ' ', el('a', { href: href(v.namespace, 'bundle', v.bundle) }, 'back to the rollout')));
  for (const o of v.objects) {
    const box = el('section', { 'data-object': o.key, 'data-change': o.change }, el('h2', {}, `${o.key} `, el('span', { class: 'muted' }, o.change)));
    if (o.rows) {
      box.append(el('table', { class: 'diff' }, el('colgroup', {}, el('col'), el('col')), el('tbody', {}, o.rows.map((r) => el('tr', { class: { '=': 'd-same', '-': 'd-minus', '+': 'd-plus', '~': 'd-change' }[r.op] },
        el('td', { class: 'l' }, r.left || ''), el('td', { class: 'r' }, r.right || ''))))));
    }
    out.push(box);
  }
  return out;
}

// ---- actions
function action(label, body, text) {
  return el('button', { 'data-action': body.action, 'data-key': 'act-' + body.action + '-' + (body.run || body.bundle || body.cluster || '') + (body.stage || '') + (body.group || '') + (body.gate || '') + (body.revision || ''),
    onclick: () => confirmAction({ title: label, text, body: () => body }) }, label);
}

// confirmAction asks before it acts, then shows the API server's answer.
function confirmAction(opts) {
  const d = $('confirm');
  $('confirm-title').textContent = opts.title;
  $('confirm-text').textContent = opts.text || '';
  $('confirm-extra').replaceChildren(opts.extra ? opts.extra() : '');
  const form = $('confirm-form');
  form.onsubmit = async (e) => {
    e.preventDefault();
    const body = Object.assign({ namespace: app.route.ns }, opts.body());
    d.close();
    await post(body);
  };
  $('confirm-cancel').onclick = () => d.close();
  d.showModal();
}

async function post(body) {
  const toast = $('toast');
  try {
    const resp = await fetch('/api/action', { method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-Flotilla-CSRF': app.session.csrf }, body: JSON.stringify(body) });
    const res = await resp.json();
    toast.className = 'toast ' + (resp.ok ? 'ok' : 'err');
    toast.dataset.result = resp.ok ? 'ok' : (res.reason || 'error');
    toast.textContent = resp.ok ? res.message : `Refused (${resp.status}${res.reason ? ' ' + res.reason : ''}): ${res.error}`;
  } catch (err) {
    toast.className = 'toast err';
    toast.dataset.result = 'error';
    toast.textContent = 'The dashboard cannot be reached: ' + err;
  }
}

async function start() {
  const resp = await fetch('/api/session', { credentials: 'same-origin' });
  if (!resp.ok) { $('main').textContent = await resp.text(); return; }
  app.session = await resp.json();
  $('who').textContent = 'as ' + app.session.user;
  // A page left for another (or kept in the back-forward cache) holds no stream open.
  window.addEventListener('pagehide', () => { if (app.source) { app.source.close(); app.source = null; } });
  window.addEventListener('pageshow', (e) => { if (e.persisted) connect(); });
  $('ns-form').addEventListener('submit', (e) => { e.preventDefault(); location.hash = href($('ns-input').value.trim()); });
  window.addEventListener('hashchange', connect);
  app.timer = setInterval(tick, 1000);
  connect();
}

document.addEventListener('DOMContentLoaded', start);

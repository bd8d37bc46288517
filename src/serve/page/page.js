// nanollm's live page: reads GET /v1/state/stream (a full `snapshot`, then `delta`s at most
// ten a second, each with an id, sent back as Last-Event-ID on a reconnect;
// docs/observability.md) and draws the block pool, the sequences, the steps and the request
// metrics. Plain JavaScript, no build step, no library.
//
// Rendering is cheap on purpose (the page shares the CPU with the engine): an update marks
// what changed, one render per animation frame touches only the changed cells and rows, and
// each chart is a handful of SVG paths rewritten as one attribute.
'use strict';

const KEEP_STEPS = 300; // steps the server keeps, and the chart shows
const KEEP_FINISHED = 64; // finished requests the server keeps
const KEEP_SERIES = 600; // points of each series over time (one per update)
const SHOW_FINISHED = 8; // finished requests listed under the running ones
const TABLE_HEAD = 12; // block-table entries shown before "…"
const TABLE_TAIL = 4; // and after it
const KEY_ITEM = 'nanollm-api-key';
const GROUP_COLOURS = ['#0ea5e9', '#f43f5e', '#84cc16', '#a855f7', '#f97316', '#14b8a6', '#eab308', '#64748b'];
const groupColour = (g) => GROUP_COLOURS[g % GROUP_COLOURS.length];

const $ = (id) => document.getElementById(id);
const grid = $('grid');
const rows = $('seq-rows');
const tooltip = $('tooltip');

// ---------------------------------------------------------------------------------------
// The state, as the stream rebuilds it.

const model = {
  state: null, // the latest whole fields: step, pool, sequences, counters, observe, …
  blocks: new Map(), // block id -> cell (cells never disappear)
  steps: [], // the last KEEP_STEPS steps
  finished: [], // the last KEEP_FINISHED finished requests, oldest first
};
// What changed since the last render.
const dirty = { all: true, blocks: new Set(), steps: false, finished: false };
// Series kept in the page from successive updates.
const series = { t: [], tps: [], kv: [], hit: [], preempt: [], evict: [] };
let previous = null; // the previous update's uptime and generated tokens, for tokens/s

function applySnapshot(data) {
  model.blocks = new Map();
  for (const b of data.blocks) model.blocks.set(b.id, b);
  model.steps = data.steps.slice(-KEEP_STEPS);
  model.finished = data.finished.slice(-KEEP_FINISHED);
  delete data.blocks;
  model.state = data;
  if (previous && data.uptime_ms < previous.uptime_ms) clearSeries(); // a restarted server
  dirty.all = true;
  addPoint(data);
}

function applyDelta(data) {
  if (!model.state) return;
  for (const k of ['step', 'uptime_ms', 'observe', 'pool', 'sequences', 'counters', 'model']) {
    if (k in data) model.state[k] = data[k];
  }
  for (const b of data.blocks) {
    model.blocks.set(b.id, b);
    dirty.blocks.add(b.id);
  }
  if (data.steps.length) {
    model.steps.push(...data.steps);
    model.steps.splice(0, Math.max(0, model.steps.length - KEEP_STEPS));
    dirty.steps = true;
  }
  if (data.finished.length) {
    model.finished.push(...data.finished);
    model.finished.splice(0, Math.max(0, model.finished.length - KEEP_FINISHED));
    dirty.finished = true;
  }
  addPoint(model.state);
}

function clearSeries() {
  for (const k in series) series[k].length = 0;
  previous = null;
}

// One point of every series per update.
function addPoint(s) {
  window.pageStats.updates += 1;
  const c = s.counters;
  const p = s.pool;
  let tps = 0;
  if (previous && s.uptime_ms > previous.uptime_ms) {
    tps = (c.generated_tokens - previous.generated) / ((s.uptime_ms - previous.uptime_ms) / 1000);
  }
  previous = { uptime_ms: s.uptime_ms, generated: c.generated_tokens };
  series.t.push(s.uptime_ms);
  series.tps.push(tps);
  series.kv.push(p.num_blocks ? (100 * (p.used + p.shared)) / p.num_blocks : 0);
  const served = c.prefix_hits_tokens + (c.prefix_disk_hits_tokens || 0);
  series.hit.push(c.prefix_queries_tokens ? (100 * served) / c.prefix_queries_tokens : 0);
  series.preempt.push(c.preemptions);
  series.evict.push(c.evictions);
  for (const k in series) series[k].splice(0, Math.max(0, series[k].length - KEEP_SERIES));
  scheduleRender();
}

// ---------------------------------------------------------------------------------------
// The connection: fetch() with the Bearer header (an EventSource cannot send one).

let controller = null;
let retryMs = 1000;
let lastEventId = null; // the last event's id: a reconnect sends it and gets what it missed

// The API key: from the URL's `#key=…` (then kept in sessionStorage and taken out of the
// address bar), else the one kept earlier in this tab.
function apiKey() {
  const m = location.hash.match(/[#&]key=([^&]*)/);
  if (m) {
    let key = m[1];
    try {
      key = decodeURIComponent(key);
    } catch (e) {
      // not percent-encoded: taken as written
    }
    sessionStorage.setItem(KEY_ITEM, key);
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem(KEY_ITEM);
}

function setStatus(kind, text) {
  const el = $('status');
  el.dataset.status = kind;
  el.textContent = text;
}

function showAuth(message) {
  $('auth-message').textContent = message;
  $('auth').hidden = false;
}

async function errorMessage(res) {
  try {
    const body = await res.json();
    return (body.error && body.error.message) || JSON.stringify(body);
  } catch (e) {
    return res.statusText;
  }
}

let generation = 0; // bumped by each connect(): a stale retry does nothing

function retryLater(kind, text, ms) {
  const wait = ms || retryMs;
  const mine = generation;
  retryMs = Math.min(retryMs * 2, 10000);
  setStatus(kind, `${text} (retrying in ${Math.round(wait / 1000)} s)`);
  setTimeout(() => {
    if (mine === generation) connect();
  }, wait);
}

async function connect() {
  if (controller) controller.abort();
  controller = new AbortController();
  generation += 1;
  const mine = generation;
  const key = apiKey();
  // The server's keys are visible ASCII without spaces (they travel in a header).
  if (key && !/^[\x21-\x7e]+$/.test(key)) {
    setStatus('auth', 'auth error');
    showAuth('This key cannot be sent in an Authorization header (visible ASCII without spaces only).');
    return;
  }
  setStatus('connecting', 'connecting…');
  let res;
  try {
    const headers = key ? { Authorization: 'Bearer ' + key } : {};
    if (model.state && lastEventId) headers['Last-Event-ID'] = lastEventId;
    res = await fetch('/v1/state/stream', {
      headers,
      signal: controller.signal,
      cache: 'no-store',
    });
  } catch (e) {
    if (e.name === 'AbortError') return;
    return retryLater('error', 'cannot reach the server');
  }
  if (res.status === 401) {
    const msg = await errorMessage(res);
    setStatus('auth', 'auth error: API key needed');
    showAuth((key ? 'Wrong API key. ' : 'This server needs its API key (--api-key): add #key=… to the address or enter it here. ') + msg);
    return;
  }
  if (!res.ok) {
    const msg = await errorMessage(res);
    // 429: 16 streams are open already (other tabs).
    return retryLater(res.status === 429 ? 'busy' : 'error', `HTTP ${res.status}: ${msg}`, res.status === 429 ? 5000 : 0);
  }
  $('auth').hidden = true;
  setStatus('live', 'live');
  retryMs = 1000;
  try {
    await readEvents(res.body);
  } catch (e) {
    if (e.name === 'AbortError') return;
  }
  if (mine === generation) retryLater('error', 'the stream ended');
}

// Split the body into SSE frames and apply each event.
async function readEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = 'message';
      let id = null;
      const data = [];
      for (const line of frame.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
        else if (line.startsWith('id:')) id = line.slice(3).trim();
      }
      if (!data.length) continue; // a keep-alive comment
      const parsed = JSON.parse(data.join('\n'));
      if (event === 'snapshot') applySnapshot(parsed);
      else if (event === 'delta') applyDelta(parsed);
      if (id !== null) lastEventId = id;
    }
  }
}

// A new `#key=…` typed into the address bar reconnects with it.
window.addEventListener('hashchange', () => {
  if (/[#&]key=/.test(location.hash)) connect();
});

$('auth').addEventListener('submit', (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY_ITEM, $('auth-key').value.trim());
  $('auth-key').value = '';
  connect();
});

// ---------------------------------------------------------------------------------------
// Rendering: at most once per frame, only what changed.

let renderQueued = false;
// What rendering has cost this tab (read by tests/browser.rs; also handy in the console).
window.pageStats = { updates: 0, renders: 0, render_ms: 0 };

function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  // A hidden tab gets no frames: render anyway, so the page is current when shown.
  if (document.hidden) setTimeout(render, 250);
  else requestAnimationFrame(render);
}

function render() {
  renderQueued = false;
  const s = model.state;
  if (!s) return;
  const t0 = performance.now();
  renderHeader(s);
  renderPool(s);
  renderSequences(s);
  if (dirty.all || dirty.steps) renderSteps(s);
  if (dirty.all || dirty.finished) renderDistributions();
  renderSeries(s);
  refreshHighlight();
  refreshTooltip();
  dirty.all = dirty.steps = dirty.finished = false;
  // Last: the step the DOM now shows.
  const stepEl = $('rendered-step');
  stepEl.dataset.step = s.step;
  stepEl.textContent = s.step;
  window.pageStats.renders += 1;
  window.pageStats.render_ms += performance.now() - t0;
}

const esc = (x) => String(x).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const fmtMs = (ms) => (ms == null ? '–' : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms < 10 ? 2 : 1)} ms`);
const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

function fmtBytes(n) {
  const units = ['bytes', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return i ? `${n.toFixed(2)} ${units[i]}` : `${n} bytes`;
}

function fmtUptime(ms) {
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `up ${h}h${String(m).padStart(2, '0')}m` : `up ${m}m${String(s % 60).padStart(2, '0')}s`;
}

// A colour per sequence: hues a golden angle apart, so neighbours differ.
function seqColour(id) {
  return `hsl(${(id * 137.508) % 360} 70% 48%)`;
}

function renderHeader(s) {
  $('model').textContent = s.model || '';
  $('uptime').textContent = fmtUptime(s.uptime_ms);
  const st = $('status');
  if (st.dataset.status === 'live') st.textContent = s.sequences.length ? 'live' : 'live · idle';
}

// --- The block pool ---------------------------------------------------------------------

const cellEls = []; // block id -> its element
let groupsKey = '';
const more = document.createElement('div');
more.className = 'cell more';
grid.appendChild(more);

function cellFor(id) {
  let el = cellEls[id];
  if (el) return el;
  el = document.createElement('div');
  el.className = 'cell';
  el.dataset.block = id;
  let next = more;
  for (let j = id + 1; j < cellEls.length; j++) {
    if (cellEls[j]) {
      next = cellEls[j];
      break;
    }
  }
  grid.insertBefore(el, next);
  cellEls[id] = el;
  return el;
}

function drawCell(el, b, blockSize) {
  el.dataset.state = b.state;
  if (b.group == null) {
    delete el.dataset.group;
  } else {
    el.dataset.group = b.group;
    el.style.setProperty('--g', groupColour(b.group));
  }
  if (b.seqs.length) {
    el.style.setProperty('--c', seqColour(b.seqs[0]));
    el.style.setProperty('--c2', seqColour(b.seqs[b.seqs.length > 1 ? 1 : 0]));
  } else {
    el.style.removeProperty('--c');
    el.style.removeProperty('--c2');
  }
  // A used block fills as its sequence writes tokens into it.
  const fill = b.state === 'used' && b.tokens ? (100 * (b.tokens[1] - b.tokens[0] + 1)) / blockSize : 100;
  el.style.setProperty('--fill', `${fill}%`);
  el.textContent = b.state === 'shared' ? String(b.refs) : '';
}

function renderPool(s) {
  const p = s.pool;
  if (dirty.all) {
    for (let id = 0; id < cellEls.length; id++) {
      if (cellEls[id] && !model.blocks.has(id)) {
        cellEls[id].remove();
        delete cellEls[id];
      }
    }
    for (const [id, b] of model.blocks) drawCell(cellFor(id), b, p.block_size);
  } else {
    for (const id of dirty.blocks) drawCell(cellFor(id), model.blocks.get(id), p.block_size);
  }
  dirty.blocks.clear();
  const n = p.materialized;
  grid.classList.toggle('big', n <= 120);
  grid.classList.toggle('small', n > 600 && n <= 3000);
  grid.classList.toggle('tiny', n > 3000);
  const rest = p.num_blocks - p.materialized;
  more.textContent = rest > 0 ? `+ ${rest} not materialized` : '';
  more.hidden = rest <= 0;
  $('pool-summary').textContent =
    `${p.used} used · ${p.shared} shared · ${p.cached} cached · ${p.free} free · ` +
    `${p.materialized} of ${p.num_blocks} blocks materialized (${fmtBytes(p.bytes_allocated)}, ${p.dtype})`;
  $('block-size').textContent = p.block_size;
  $('unmaterialized').textContent =
    `KV usage ${((100 * (p.used + p.shared)) / Math.max(1, p.num_blocks)).toFixed(1)}% of the budget · ` +
    `one block = ${p.block_size} tokens × every layer of its group = ${fmtBytes(p.block_bytes)}`;
  renderGroups(p);
}

// A hybrid model (several KV groups): each group's blocks get their own outline colour.
function renderGroups(p) {
  const hybrid = p.groups.length > 1;
  grid.classList.toggle('hybrid', hybrid);
  if (!hybrid) {
    if (groupsKey) $('groups').textContent = '';
    groupsKey = '';
    return;
  }
  const held = p.groups.map(() => 0);
  for (const b of model.blocks.values()) if (b.group != null && b.state !== 'free') held[b.group] += 1;
  const key = JSON.stringify([p.groups, held]);
  if (key === groupsKey) return;
  groupsKey = key;
  $('groups').innerHTML = p.groups
    .map((g) => {
      const kind = g.window == null ? 'full' : `sliding ${g.window}`;
      const counts = g.blocks == null ? '' : ` · blocks: ${g.used} used, ${g.shared} shared, ${g.cached} cached · ${g.tokens} tokens in the used and shared blocks`;
      const title = `KV group ${g.id}: ${g.window == null ? 'full attention' : `sliding window of ${g.window} tokens`}, layers ${g.layers.join(', ')}${counts}`;
      return `<span class="g" title="${title}"><i style="background:${groupColour(g.id)}"></i>` +
        `group ${g.id}: ${kind}, ${plural(g.layers.length, 'layer')}, ${plural(held[g.id], 'block')}` +
        (g.tokens == null ? '' : `, ${plural(g.tokens, 'token')} held`) + '</span>';
    })
    .join('') + '<span class="g dim">(underline = KV group; a free block has none)</span>';
}

// --- Sequences --------------------------------------------------------------------------

const rowEls = new Map(); // sequence id -> { el, sig }

function stateText(q) {
  if (q.state === 'prefilling' && q.chunk) return `prefilling chunk ${q.chunk[0]}/${q.chunk[1]}`;
  return q.state;
}

function tableText(table) {
  return table
    .map((list, g) => {
      const entry = (b, i) => `${i}→${b == null ? '·' : b}`;
      let parts;
      if (list.length > TABLE_HEAD + TABLE_TAIL) {
        const skipped = list.length - TABLE_HEAD - TABLE_TAIL;
        parts = list.slice(0, TABLE_HEAD).map(entry);
        parts.push(`… ${skipped} more …`);
        parts.push(...list.slice(-TABLE_TAIL).map((b, i) => entry(b, list.length - TABLE_TAIL + i)));
      } else {
        parts = list.map(entry);
      }
      return (table.length > 1 ? `<b>g${g}</b> ` : '') + (parts.join(' ') || '–');
    })
    .join('<br>');
}

function drawSeqRow(el, q) {
  el.dataset.state = q.state;
  el.title = '';
  el.style.setProperty('--c', seqColour(q.id));
  const preempted = q.preemptions ? ` <span class="dim" title="times preempted">↺${q.preemptions}</span>` : '';
  el.innerHTML =
    `<td><i class="dot"></i>${q.id}</td>` +
    `<td><span class="badge ${q.state}">${stateText(q)}</span>${preempted}</td>` +
    `<td>${q.prompt_tokens}</td><td>${q.cached_tokens}</td>` +
    `<td>${q.generated_tokens} / ${q.max_tokens}</td>` +
    `<td class="table">${q.block_table.length ? tableText(q.block_table) : '<span class="dim">no blocks</span>'}</td>`;
}

function drawFinishedRow(el, f) {
  el.dataset.state = 'finished';
  el.style.setProperty('--c', seqColour(f.id));
  el.innerHTML =
    `<td><i class="dot"></i>${f.id}</td>` +
    `<td><span class="badge finished">finished · ${esc(f.finish_reason)}</span></td>` +
    `<td>${f.prompt_tokens}</td><td>${f.cached_tokens}</td><td>${f.generated_tokens}</td>` +
    `<td class="dim details">TTFT ${fmtMs(f.ttft_ms)} · TPOT ${fmtMs(f.tpot_ms)} · E2EL ${fmtMs(f.e2el_ms)} · peak ${plural(f.peak_blocks, 'block')}</td>`;
  el.title =
    `seq ${f.id} finished at step ${f.step} (${f.finish_reason}): TTFT ${fmtMs(f.ttft_ms)}, TPOT ${fmtMs(f.tpot_ms)}, ` +
    `E2EL ${fmtMs(f.e2el_ms)}, ${plural(f.preemptions, 'preemption')}, at most ${plural(f.peak_blocks, 'block')} held`;
}

function renderSequences(s) {
  const live = new Set(s.sequences.map((q) => q.id));
  const wanted = s.sequences.map((q) => ['seq', q]);
  for (let i = model.finished.length - 1, n = 0; i >= 0 && n < SHOW_FINISHED; i--) {
    const f = model.finished[i];
    if (live.has(f.id)) continue;
    wanted.push(['finished', f]);
    n += 1;
  }
  const keep = new Set();
  let prev = null;
  for (const [kind, x] of wanted) {
    keep.add(x.id);
    let r = rowEls.get(x.id);
    if (!r) {
      r = { el: document.createElement('tr'), sig: '' };
      r.el.dataset.seq = x.id;
      rowEls.set(x.id, r);
    }
    const sig = kind + JSON.stringify(x);
    if (r.sig !== sig) {
      r.sig = sig;
      if (kind === 'seq') drawSeqRow(r.el, x);
      else drawFinishedRow(r.el, x);
    }
    const next = prev ? prev.nextSibling : rows.firstChild;
    if (next !== r.el) rows.insertBefore(r.el, next);
    prev = r.el;
  }
  for (const [id, r] of rowEls) {
    if (!keep.has(id)) {
      r.el.remove();
      rowEls.delete(id);
    }
  }
  $('no-seqs').hidden = wanted.length > 0;
  const by = {};
  for (const q of s.sequences) by[q.state] = (by[q.state] || 0) + 1;
  $('seq-summary').textContent = s.sequences.length
    ? Object.entries(by).map(([k, n]) => `${n} ${k}`).join(' · ')
    : 'none running';
}

// --- Highlights and the tooltip ----------------------------------------------------------

let pinnedSeq = null; // clicked
let hoverSeq = null; // hovered row
let hoverBlock = null; // hovered cell's id
let lit = [];

function refreshHighlight() {
  for (const el of lit) el.classList.remove('hl');
  lit = [];
  const id = hoverSeq != null ? hoverSeq : pinnedSeq;
  const q = id == null || !model.state ? null : model.state.sequences.find((x) => x.id === id);
  if (q) {
    for (const list of q.block_table) {
      for (const b of list) {
        if (b != null && cellEls[b]) {
          cellEls[b].classList.add('hl');
          lit.push(cellEls[b]);
        }
      }
    }
  }
  grid.classList.toggle('focus', !!q);
  // The rows of the hovered block's sequences.
  const b = hoverBlock == null ? null : model.blocks.get(hoverBlock);
  for (const sid of b ? b.seqs : []) {
    const r = rowEls.get(sid);
    if (r) {
      r.el.classList.add('hl');
      lit.push(r.el);
    }
  }
  for (const [sid, r] of rowEls) r.el.classList.toggle('pinned', sid === pinnedSeq);
}

function describeBlock(b) {
  const lines = [`<b>block ${b.id}</b> · ${b.state}${b.state === 'shared' ? ` by ${b.refs} sequences` : ''}`];
  if (b.group != null && model.state.pool.groups.length > 1) {
    const g = model.state.pool.groups[b.group];
    lines.push(`KV group ${b.group} (${g && g.window != null ? `sliding window ${g.window}` : 'full attention'})`);
  }
  if (b.seqs.length) lines.push(`held by seq ${b.seqs.join(', ')} as logical block ${b.logical}`);
  if (b.tokens) lines.push(`tokens ${b.tokens[0]}–${b.tokens[1]} · ${b.prompt ? 'prompt block' : 'holds generated tokens'}`);
  if (b.state === 'cached') lines.push('in the prefix cache, held by no sequence: evictable; a prompt with the same prefix reuses it');
  else if (b.in_prefix_cache) lines.push('in the prefix cache');
  if (b.state === 'free') lines.push('on the free list');
  return lines.join('<br>');
}

function refreshTooltip() {
  const b = hoverBlock == null ? null : model.blocks.get(hoverBlock);
  tooltip.hidden = !b;
  if (b) tooltip.innerHTML = describeBlock(b);
}

grid.addEventListener('mouseover', (e) => {
  const el = e.target.closest('.cell[data-block]');
  hoverBlock = el ? Number(el.dataset.block) : null;
  refreshTooltip();
  refreshHighlight();
});
grid.addEventListener('mousemove', (e) => {
  tooltip.style.left = `${Math.min(e.clientX + 14, window.innerWidth - 330)}px`;
  tooltip.style.top = `${e.clientY + 14}px`;
});
grid.addEventListener('mouseleave', () => {
  hoverBlock = null;
  refreshTooltip();
  refreshHighlight();
});
rows.addEventListener('mouseover', (e) => {
  const tr = e.target.closest('tr[data-seq]');
  hoverSeq = tr ? Number(tr.dataset.seq) : null;
  refreshHighlight();
});
rows.addEventListener('mouseleave', () => {
  hoverSeq = null;
  refreshHighlight();
});
rows.addEventListener('click', (e) => {
  const tr = e.target.closest('tr[data-seq]');
  const id = tr ? Number(tr.dataset.seq) : null;
  pinnedSeq = pinnedSeq === id ? null : id;
  refreshHighlight();
});

// --- Steps ------------------------------------------------------------------------------

// Bars as one path per series: newest step at the right, KEEP_STEPS slots wide.
function renderSteps(s) {
  const st = model.steps;
  const slot = 1000 / KEEP_STEPS;
  const w = (slot * 0.8).toFixed(2);
  const maxTokens = Math.max(1, ...st.map((x) => x.tokens));
  const maxMs = Math.max(0.001, ...st.map((x) => x.ms));
  const bar = (x, y, h) => (h > 0 ? `M${x} ${y.toFixed(2)}h${w}v${h.toFixed(2)}h-${w}z` : '');
  let decode = '';
  let prefill = '';
  let ms = '';
  const offset = KEEP_STEPS - st.length;
  st.forEach((x, i) => {
    const left = ((offset + i) * slot).toFixed(2);
    const hd = (100 * x.decode_seqs) / maxTokens;
    const hp = (100 * x.prefill_tokens) / maxTokens;
    decode += bar(left, 108 - hd, hd);
    prefill += bar(left, 108 - hd - hp, hp);
    const hm = (56 * x.ms) / maxMs;
    ms += bar(left, 170 - hm, hm);
  });
  $('steps-decode').setAttribute('d', decode);
  $('steps-prefill').setAttribute('d', prefill);
  $('steps-ms').setAttribute('d', ms);
  $('steps-max-tokens').textContent = `${maxTokens} tokens`;
  $('steps-max-ms').textContent = fmtMs(maxMs);
  if (!st.length) {
    $('steps-summary').textContent = 'no step yet';
    return;
  }
  const mean = (f) => st.reduce((a, x) => a + f(x), 0) / st.length;
  const o = s.observe;
  const cost = s.counters.step_ms ? ((100 * o.cpu_ms) / s.counters.step_ms).toFixed(3) : '0';
  // Speculative decoding: the window's drafts, kept and rolled back.
  const drafted = st.reduce((a, x) => a + (x.draft_tokens || 0), 0);
  const accepted = st.reduce((a, x) => a + (x.accepted_tokens || 0), 0);
  const spec = drafted
    ? ` · drafts ${accepted} of ${drafted} accepted, ${drafted - accepted} rolled back`
    : '';
  $('steps-summary').textContent =
    `steps ${st[0].step}–${st[st.length - 1].step}: mean ${fmtMs(mean((x) => x.ms))}, ` +
    `batch ${mean((x) => x.batch_size).toFixed(1)} sequences, ${mean((x) => x.tokens).toFixed(1)} tokens` +
    `${spec} · watching costs the engine ${cost}% of its step time`;
}

// --- Distributions and series ------------------------------------------------------------

function quantile(sorted, q) {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

// A histogram of `values` (ms) as one path of 24 bars, up to the 99th percentile.
function histogram(card, values, quantiles) {
  const sorted = values.filter((v) => v != null).sort((a, b) => a - b);
  const el = $(card);
  if (!sorted.length) {
    el.querySelector('.value').innerHTML = '<small>no finished request yet</small>';
    el.querySelector('path').setAttribute('d', '');
    return;
  }
  const [[label, q], ...others] = quantiles;
  el.querySelector('.value').innerHTML =
    `${fmtMs(quantile(sorted, q))} <small>${label}</small><span class="more">` +
    others.map(([l, x]) => `${l} ${fmtMs(quantile(sorted, x))}`).join(' · ') +
    ` · ${plural(sorted.length, 'sample')}</span>`;
  const bins = 24;
  const top = quantile(sorted, 0.99) * 1.05 || 1;
  const counts = new Array(bins).fill(0);
  for (const v of sorted) counts[Math.min(bins - 1, Math.floor((v / top) * bins))] += 1;
  const most = Math.max(...counts);
  const w = 200 / bins;
  let d = '';
  counts.forEach((c, i) => {
    const h = (48 * c) / most;
    if (h > 0) d += `M${(i * w).toFixed(2)} ${(50 - h).toFixed(2)}h${(w * 0.85).toFixed(2)}v${h.toFixed(2)}h-${(w * 0.85).toFixed(2)}z`;
  });
  el.querySelector('path').setAttribute('d', d);
  el.title = `${sorted.length} samples from the last ${model.finished.length} finished requests; bars up to p99`;
}

function renderDistributions() {
  const f = model.finished;
  histogram('card-ttft', f.map((x) => x.ttft_ms), [['p50', 0.5], ['p90', 0.9], ['p99', 0.99]]);
  histogram('card-tpot', f.map((x) => x.tpot_ms), [['p50', 0.5], ['p90', 0.9], ['p99', 0.99]]);
  histogram('card-itl', f.flatMap((x) => x.itl_ms), [['p50', 0.5], ['p90', 0.9], ['p99', 0.99]]);
}

// A line of `ys` over the series' times, scaled to [0, max].
function line(ys, max) {
  const t = series.t;
  if (!ys.length) return '';
  const t0 = t[0];
  const span = Math.max(1, t[t.length - 1] - t0);
  const top = Math.max(max, 1e-9);
  return ys
    .map((y, i) => `${i ? 'L' : 'M'}${((200 * (t[i] - t0)) / span).toFixed(1)} ${(48 - (46 * y) / top).toFixed(1)}`)
    .join('');
}

function renderSeries(s) {
  const last = (a) => a[a.length - 1] || 0;
  const card = (id) => $(id);
  const set = (id, html, paths) => {
    card(id).querySelector('.value').innerHTML = html;
    const els = card(id).querySelectorAll('path');
    paths.forEach((d, i) => els[i].setAttribute('d', d));
  };
  const peak = Math.max(0, ...series.tps);
  set('card-tps', `${last(series.tps).toFixed(1)} <small>now</small><span class="more">peak ${peak.toFixed(1)}</span>`, [line(series.tps, peak)]);
  const p = s.pool;
  set('card-kv', `${last(series.kv).toFixed(1)}%<span class="more">${p.used + p.shared} of ${p.num_blocks} blocks</span>`, [line(series.kv, 100)]);
  const c = s.counters;
  set(
    'card-hit',
    c.prefix_queries_tokens
      ? `${last(series.hit).toFixed(1)}%<span class="more">${c.prefix_hits_tokens + (c.prefix_disk_hits_tokens || 0)} of ${c.prefix_queries_tokens} prompt tokens${c.prefix_disk_hits_tokens ? `, ${c.prefix_disk_hits_tokens} from disk` : ''}</span>`
      : '<small>no prompt looked up yet</small>',
    [line(series.hit, 100)],
  );
  const top = Math.max(1, last(series.preempt), last(series.evict));
  set(
    'card-evict',
    `${c.preemptions} <small>·</small> ${c.evictions}<span class="more"><span style="color:#dc2626">━</span> preemptions <span style="color:#9aa5b8">━</span> evictions</span>`,
    [line(series.preempt, top), line(series.evict, top)],
  );
}

connect();

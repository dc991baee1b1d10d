// Cubby dashboard: live parts of the server-rendered pages. No build step and
// no third-party code except the vendored xterm.js on the sandbox page.
(function () {
  'use strict';

  const base = '/dashboard';
  const csrf = () => (document.querySelector('meta[name="csrf-token"]') || {}).content || '';

  // api fetches a dashboard URL with the CSRF token; an expired session goes
  // back to the login page.
  async function api(url, opts) {
    opts = Object.assign({ credentials: 'same-origin' }, opts || {});
    opts.headers = Object.assign({ 'X-CSRF-Token': csrf() }, opts.headers || {});
    const r = await fetch(url, opts);
    if (r.status === 401) {
      location.href = base + '/login?next=' + encodeURIComponent(location.pathname);
      throw new Error('your session expired');
    }
    return r;
  }

  async function getJSON(url, opts) {
    const r = await api(url, opts);
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      const e = new Error(body.message || r.statusText);
      e.status = r.status;
      throw e;
    }
    return body;
  }

  // h builds an element: h('a', {href: '…'}, 'text', child…).
  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  }

  function bytes(n) {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + u[i];
  }

  function every(ms, f) {
    let timer = null;
    const tick = async () => {
      try { if (await f() === false) return; } catch (e) { /* shown by f */ }
      timer = setTimeout(tick, ms);
    };
    tick();
    return () => clearTimeout(timer);
  }

  // ---- overview ----------------------------------------------------------

  function overviewPage() {
    const root = document.getElementById('overview');
    const status = document.getElementById('overview-status');
    const set = (f, v) => { const e = root.querySelector('[data-field="' + f + '"]'); if (e) e.textContent = v; };
    every(5000, async () => {
      let o;
      try { o = await getJSON(base + '/api/overview'); } catch (e) { status.textContent = 'Update failed: ' + e.message; return; }
      set('running', o.running);
      set('paused', o.paused);
      set('createP50', o.create.count ? Math.round(o.create.p50ms) + ' ms' : '—');
      set('createCount', o.create.count);
      set('cpu', o.host.cpuPct >= 0 ? Math.round(o.host.cpuPct) + '%' : 'measuring…');
      set('mem', bytes(o.host.memUsed) + ' used of ' + bytes(o.host.memTotal));
      set('disk', bytes(o.host.diskFree) + ' free of ' + bytes(o.host.diskTotal));
      const pools = root.querySelector('[data-field="pools"]');
      if (o.pools.length) {
        pools.replaceChildren(...o.pools.map((p) => h('li', {},
          h('strong', { text: p.template }), `: ${p.ready} of ${p.target} ready` + (p.booting ? `, ${p.booting} booting` : ''),
          h('meter', { min: 0, max: p.target, value: p.ready, 'aria-label': p.template + ' pool fill' }))));
      }
      status.textContent = 'Updated ' + new Date(o.at).toLocaleTimeString() + '; refreshes every 5 seconds.';
    });
  }

  // ---- sandboxes table ---------------------------------------------------

  function sandboxesPage() {
    const all = document.getElementById('select-all');
    if (!all) return;
    all.addEventListener('change', () => {
      document.querySelectorAll('input[name="ids"]').forEach((c) => { c.checked = all.checked; });
    });
  }

  // ---- one sandbox ---------------------------------------------------------

  function sandboxPage() {
    const root = document.getElementById('sandbox');
    const id = root.dataset.id;
    const url = (p) => base + '/api/sandboxes/' + id + p;
    metrics(url);
    logs(url);
    if (root.dataset.state === 'paused') {
      for (const s of ['term-status', 'cell-status', 'files-status']) {
        document.getElementById(s).textContent = 'The sandbox is paused: resume it to use this.';
      }
      for (const b of ['term-open', 'cell-run']) document.getElementById(b).disabled = true;
      return;
    }
    terminal(id);
    notebook(url);
    files(id, url);
  }

  function metrics(url) {
    const svg = document.getElementById('chart');
    const now = document.getElementById('metrics-now');
    const ns = 'http://www.w3.org/2000/svg';
    every(5000, async () => {
      let pts;
      try { pts = await getJSON(url('/metrics')); } catch (e) {
        now.textContent = e.status === 404 ? 'The sandbox is gone.' : 'Metrics unavailable: ' + e.message;
        return e.status !== 404;
      }
      const W = 600, H = 160;
      svg.replaceChildren();
      for (const y of [0.25, 0.5, 0.75]) {
        const l = document.createElementNS(ns, 'line');
        l.setAttribute('x1', 0); l.setAttribute('x2', W); l.setAttribute('y1', H * y); l.setAttribute('y2', H * y);
        svg.append(l);
      }
      if (!pts.length) { now.textContent = 'No samples yet (one every few seconds).'; return; }
      const t0 = pts[0].t, t1 = Math.max(pts[pts.length - 1].t, t0 + 1);
      const line = (cls, f) => {
        const p = document.createElementNS(ns, 'polyline');
        p.setAttribute('class', cls);
        p.setAttribute('points', pts.map((m) => ((m.t - t0) / (t1 - t0) * W).toFixed(1) + ',' + (H - Math.min(100, f(m)) / 100 * H).toFixed(1)).join(' '));
        svg.append(p);
      };
      line('cpu', (m) => m.cpu);
      line('mem', (m) => m.memTotal ? 100 * m.mem / m.memTotal : 0);
      const last = pts[pts.length - 1];
      now.textContent = `now: CPU ${last.cpu.toFixed(0)}%, memory ${bytes(last.mem)} of ${bytes(last.memTotal)}, disk ${bytes(last.disk)} of ${bytes(last.diskTotal)}`;
    });
  }

  function logs(url) {
    const pre = document.getElementById('log-lines');
    const follow = document.getElementById('logs-follow');
    let since = null;
    let seen = new Set(); // "t|message" of the lines stamped `since`, already shown
    const fmt = (l) => {
      const f = Object.entries(l.fields || {}).map(([k, v]) => k + '=' + v).join(' ');
      return new Date(l.t).toISOString().slice(11, 23) + ' ' + l.level.padEnd(5) + ' ' + l.message + (f ? '  ' + f : '') + '\n';
    };
    every(2000, async () => {
      if (!follow.checked && since !== null) return;
      let lines;
      try { lines = await getJSON(url('/logs' + (since === null ? '' : '?since=' + since))); } catch (e) {
        pre.append(h('span', { class: 'lvl-error', text: (e.status === 404 ? 'The sandbox is gone; the tail stopped.' : 'Logs unavailable: ' + e.message) + '\n' }));
        return e.status !== 404;
      }
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      for (const l of lines) {
        const k = l.t + '|' + l.message;
        if (seen.has(k)) continue;
        if (l.t !== since) { since = l.t; seen = new Set(); }
        seen.add(k);
        pre.append(h('span', { class: 'lvl-' + l.level, text: fmt(l) }));
      }
      if (since === null) since = 0;
      if (follow.checked && atBottom) pre.scrollTop = pre.scrollHeight;
    });
  }

  function terminal(id) {
    const open = document.getElementById('term-open');
    const close = document.getElementById('term-close');
    const status = document.getElementById('term-status');
    const box = document.getElementById('term');
    let ws = null, term = null, fit = null;
    const onResize = () => { if (fit) fit.fit(); };
    open.addEventListener('click', () => {
      if (typeof Terminal === 'undefined') { status.textContent = 'The terminal code did not load.'; return; }
      box.replaceChildren();
      term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000,
        theme: { background: '#111827', foreground: '#e5e7eb' } });
      fit = new FitAddon.FitAddon();
      term.loadAddon(fit);
      term.open(box);
      fit.fit();
      const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
      ws = new WebSocket(`${proto}//${location.host}${base}/sandboxes/${id}/terminal?cols=${term.cols}&rows=${term.rows}`);
      ws.binaryType = 'arraybuffer';
      status.textContent = 'Connecting…';
      open.disabled = true;
      ws.onopen = () => { status.textContent = 'Connected.'; close.disabled = false; term.focus(); };
      ws.onmessage = (ev) => {
        if (typeof ev.data !== 'string') { term.write(new Uint8Array(ev.data)); return; }
        const m = JSON.parse(ev.data);
        if (m.type === 'exit') {
          term.write('\r\n\x1b[33m' + m.message + '\x1b[0m\r\n');
          status.textContent = m.message;
        }
      };
      ws.onclose = () => {
        if (!/exit|killed|ended|Cannot/.test(status.textContent)) status.textContent = 'Disconnected.';
        open.disabled = false; close.disabled = true; ws = null;
      };
      term.onData((d) => { if (ws && ws.readyState === 1) ws.send(JSON.stringify({ type: 'input', data: d })); });
      term.onResize((s) => { if (ws && ws.readyState === 1) ws.send(JSON.stringify({ type: 'resize', cols: s.cols, rows: s.rows })); });
    });
    close.addEventListener('click', () => { if (ws) ws.close(); });
    window.addEventListener('resize', onResize);
  }

  function notebook(url) {
    const sel = document.getElementById('cell-context');
    const code = document.getElementById('cell-code');
    const run = document.getElementById('cell-run');
    const stop = document.getElementById('cell-stop');
    const out = document.getElementById('cell-output');
    const status = document.getElementById('cell-status');
    let abort = null;
    getJSON(url('/contexts')).then((list) => {
      for (const c of list) sel.append(h('option', { value: 'ctx:' + c.id, text: `${c.language} · ${c.id} (${c.cwd})` }));
    }).catch(() => {});
    const stream = (cls) => {
      const last = out.lastElementChild;
      if (last && last.tagName === 'PRE' && last.className === cls) return last;
      const pre = h('pre', { class: cls });
      out.append(pre);
      return pre;
    };
    const show = (ev) => {
      switch (ev.type) {
        case 'stdout': case 'stderr': stream(ev.type).textContent += ev.text; break;
        case 'result': result(ev); break;
        case 'error': out.append(h('pre', { class: 'err', text: `${ev.name}: ${ev.value}\n${ev.traceback}` })); break;
        case 'failure': out.append(h('pre', { class: 'err', text: ev.message })); break;
      }
    };
    const result = (ev) => {
      const label = ev.chart ? `${ev.chart.type} chart ${ev.chart.title || ''}`.trim() : 'cell result';
      if (ev.png) out.append(h('img', { src: 'data:image/png;base64,' + ev.png, alt: label }));
      else if (ev.jpeg) out.append(h('img', { src: 'data:image/jpeg;base64,' + ev.jpeg, alt: label }));
      else if (ev.svg) out.append(h('img', { src: 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(ev.svg))), alt: label }));
      else if (ev.html) out.append(h('iframe', { sandbox: '', srcdoc: ev.html, title: 'HTML result' }));
      else if (ev.text) out.append(h('pre', { class: 'result', text: ev.text }));
    };
    const go = async () => {
      if (abort) return;
      out.replaceChildren();
      const [kind, v] = sel.value.split(/:(.*)/s);
      const body = { code: code.value };
      if (kind === 'ctx') body.context = v; else body.language = v;
      abort = new AbortController();
      run.disabled = true; stop.disabled = false;
      status.textContent = 'Running…';
      const t0 = performance.now();
      try {
        const r = await api(url('/execute'), { method: 'POST', body: JSON.stringify(body), signal: abort.signal,
          headers: { 'Content-Type': 'application/json' } });
        if (!r.ok) { const e = await r.json().catch(() => ({})); throw new Error(e.message || r.statusText); }
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let buf = '', end = 'The stream ended early.';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, i); buf = buf.slice(i + 1);
            if (!line.trim()) continue;
            const ev = JSON.parse(line);
            if (ev.type === 'end') end = `Done in ${((performance.now() - t0) / 1000).toFixed(1)} s.`;
            else if (ev.type === 'failure') end = 'Failed.';
            show(ev);
          }
        }
        status.textContent = end;
      } catch (e) {
        status.textContent = e.name === 'AbortError' ? 'Interrupted.' : 'Failed: ' + e.message;
      } finally {
        abort = null; run.disabled = false; stop.disabled = true;
      }
    };
    run.addEventListener('click', go);
    stop.addEventListener('click', () => { if (abort) abort.abort(); });
    code.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); go(); } });
  }

  function files(id, url) {
    const form = document.getElementById('files-go');
    const input = document.getElementById('files-path');
    const up = document.getElementById('files-up');
    const tbody = document.querySelector('#files-table tbody');
    const status = document.getElementById('files-status');
    const upload = document.getElementById('upload');
    const chooser = document.getElementById('upload-files');
    let cwd = input.value;
    const load = async (p) => {
      let d;
      try { d = await getJSON(url('/files?path=' + encodeURIComponent(p))); } catch (e) { status.textContent = e.message; return; }
      cwd = d.path; input.value = d.path;
      tbody.replaceChildren(...d.entries.sort((a, b) => (a.type === 'dir') === (b.type === 'dir') ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1)
        .map((e) => h('tr', {},
          h('td', {}, e.type === 'dir'
            ? h('button', { type: 'button', class: 'linkish', text: e.name + '/', onclick: () => load(e.path) })
            : h('a', { href: `${base}/sandboxes/${id}/download?path=${encodeURIComponent(e.path)}`, download: e.name, text: e.name })),
          h('td', { text: e.type === 'dir' ? '—' : bytes(e.size) }),
          h('td', { text: e.modified > 0 ? new Date(e.modified).toLocaleString() : '' }))));
      status.textContent = d.entries.length + ' entries in ' + d.path + (d.truncated ? ' (only the first ones are shown)' : '');
    };
    form.addEventListener('submit', (e) => { e.preventDefault(); load(input.value); });
    up.addEventListener('click', () => load(cwd.replace(/\/[^/]+\/?$/, '') || '/'));
    upload.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (!chooser.files.length) { status.textContent = 'Choose files to upload first.'; return; }
      const fd = new FormData();
      for (const f of chooser.files) fd.append('file', f, f.name);
      status.textContent = 'Uploading…';
      try {
        const r = await getJSON(url('/files?path=' + encodeURIComponent(cwd)), { method: 'POST', body: fd });
        status.textContent = 'Uploaded ' + r.written.join(', ');
        chooser.value = '';
        await load(cwd);
        status.textContent = 'Uploaded ' + r.written.join(', ');
      } catch (err) { status.textContent = 'Upload failed: ' + err.message; }
    });
    load(cwd);
  }

  const pages = { overview: overviewPage, sandboxes: sandboxesPage, sandbox: sandboxPage };
  document.addEventListener('DOMContentLoaded', () => {
    const f = pages[document.body.dataset.page];
    if (f) f();
  });
})();

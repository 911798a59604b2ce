// UI test of the WarpForge extension in a real VS Code: code-server 4.99.4 (VS Code 1.99.3) driven by
// playwright-core in Debian's Chromium (see ../shared/notes/vscode-ui-testing.md).
//
// The language server is the real `warpforge serve`, but optimize jobs use the DETERMINISTIC EVALUATOR
// FIXTURE (tests/lsp_fixture_evaluator.py, setting warpforge.evaluationBackend =
// "python:lsp_fixture_evaluator:make"): candidates are compiled with the real nvcc, their speedups are
// synthetic, and the GPU name says "deterministic fixture (no GPU)". CI has no GPU.
//
// Sessions: the .vsix alone with a clean interpreter (bundled server, SASS from the bundled nvdisasm, the
// language status item, Install GPU Support offline); a trusted workspace (hints, review, jobs); Restricted
// Mode; and last, the .vsix alone on a multi-file CMake project (tests/projects/ui_multi, issue 29): a missing
// header on its #include and its quick fix, a header save refreshing its includer, no false error once cmake
// writes compile_commands.json, Add benchmark spec filled from the other file's launch.
//
// Usage: node extension/test/ui.mjs --code-server DIR --vsix FILE [--python PY] [--keep]
// Screenshots: extension/test/screenshots/*.png.
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const CODE_SERVER_DIR = opt('--code-server', path.join(os.homedir(), '.cache/warpforge-ci/code-server'));
const VSIX = opt('--vsix', path.join(REPO, 'warpforge.vsix'));
const PYTHON = opt('--python', path.join(REPO, '.venv/bin/python'));
const KEEP = args.includes('--keep');
const SHOTS = path.join(REPO, 'extension/test/screenshots');
const ENTRY = path.join(CODE_SERVER_DIR, 'node_modules/code-server/out/node/entry.js');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
// compiler/SASS hints (WF0xx, WF104) need nvcc; source hints (WF101) do not
const HAVE_NVCC = spawnSync('sh', ['-c', 'command -v nvcc'], { encoding: 'utf8' }).status === 0;

const T0 = Date.now();
const since = () => ((Date.now() - T0) / 1000).toFixed(1).padStart(6);
const step = (msg) => console.log(`[ui ${since()} s] ${msg}`);
let failures = 0;
const passed = [];

// ---------------------------------------------------------------------------------------------- setup
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'warpforge-ui-'));
const EXT = path.join(TMP, 'extensions');
const WS = path.join(TMP, 'workspace');
const CFG = path.join(TMP, 'config.yaml');
fs.mkdirSync(path.join(WS, 'kernels'), { recursive: true });
fs.mkdirSync(SHOTS, { recursive: true });
for (const f of fs.readdirSync(SHOTS)) {
  if (f.endsWith('.png')) fs.rmSync(path.join(SHOTS, f));
}
for (const f of fs.readdirSync(path.join(REPO, 'kernels'))) {
  fs.copyFileSync(path.join(REPO, 'kernels', f), path.join(WS, 'kernels', f));
}
fs.writeFileSync(CFG, 'bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n');
// A hostile repository: modules the server imports, shadowed by files that leave a marker when imported.
// The extension starts Python with -P / PYTHONSAFEPATH in a neutral directory, so none may ever run.
const PWNED = path.join(TMP, 'pwned');
for (const m of ['json', 'asyncio', 'numpy', 'pygls', 'lsprotocol', 'typing', 'logging']) {
  fs.writeFileSync(path.join(WS, `${m}.py`), `open(${JSON.stringify(PWNED)}, 'a').write(${JSON.stringify(m)} + '\\n')\n`);
}

/** The parent pid of `pid` (from /proc/PID/stat; the command name may hold spaces and parentheses). */
function parentOf(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** Does `pid` descend from one of this test's code-servers? Other `warpforge serve` processes on the machine
 *  (another test suite's, started the old way on purpose) are not the extension's to answer for. */
function ours(pid) {
  for (let p = Number(pid), hops = 0; p > 1 && hops < 64; hops += 1) {
    if (groups.has(p)) return true;
    p = parentOf(p);
  }
  return false;
}

/** The running `warpforge serve` processes this test's editors started: argv, environment and working
 *  directory from /proc. */
function serverProcesses() {
  const out = [];
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
      if (!(argv.includes('warpforge') && argv.includes('serve')) || !ours(pid)) continue;
      const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      out.push({ pid, argv, env, cwd: fs.realpathSync(`/proc/${pid}/cwd`) });
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

/** A fresh user-data dir. `trust`: false opens the folder in Restricted Mode (workspace trust on, no prompt). */
function makeProfile(name, { trust = true, machine } = {}) {
  const ud = path.join(TMP, name);
  fs.mkdirSync(path.join(ud, 'User'), { recursive: true });
  const settings = {
    'telemetry.telemetryLevel': 'off',
    'update.mode': 'none',
    'extensions.autoUpdate': false,
    'extensions.autoCheckUpdates': false,
    'extensions.ignoreRecommendations': true,
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'workbench.enableExperiments': false,
    'git.enabled': false,
    'chat.disableAIFeatures': true,
    'security.workspace.trust.enabled': !trust,
    'security.workspace.trust.startupPrompt': 'never',
    'workbench.colorTheme': 'Default Dark Modern',
    'editor.hover.delay': 200,
    'editor.minimap.enabled': false,
    'files.autoSave': 'off',
    'warpforge.budget': 12,
    'warpforge.trace.server': process.env.WARPFORGE_UI_TRACE || 'off',
  };
  fs.writeFileSync(path.join(ud, 'User', 'settings.json'), JSON.stringify(settings, null, 2));
  // The extension under test: the checkout's interpreter and the DETERMINISTIC EVALUATOR FIXTURE (no GPU in
  // CI). These settings are machine-scoped (an interpreter path belongs to a machine), so with code-server
  // they go in the remote machine's settings, as a user of a remote window sets them.
  fs.mkdirSync(path.join(ud, 'Machine'), { recursive: true });
  fs.writeFileSync(path.join(ud, 'Machine', 'settings.json'), JSON.stringify(machine ?? {
    'warpforge.pythonPath': PYTHON,
    'warpforge.evaluationBackend': 'python:lsp_fixture_evaluator:make',
  }, null, 2));
  return { ud, trust, settingsFile: path.join(ud, 'User', 'settings.json') };
}

const env = {
  ...process.env,
  XDG_CONFIG_HOME: path.join(TMP, 'xdg-config'),
  XDG_DATA_HOME: path.join(TMP, 'xdg-data'),
  // the server imports warpforge from the checkout and the fixture evaluator from tests/
  PYTHONPATH: [path.join(REPO, 'server'), path.join(REPO, 'tests'), process.env.PYTHONPATH ?? ''].filter(Boolean).join(path.delimiter),
  WARPFORGE_FIXTURE_DELAY: process.env.WARPFORGE_FIXTURE_DELAY ?? '0.3',
  WARPFORGE_CACHE: path.join(TMP, 'warpforge-cache'),
};
const csArgs = (ud) => ['--config', CFG, '--user-data-dir', ud, '--extensions-dir', EXT];

const groups = new Set(); // process groups of running code-servers
const killGroups = (sig = 'SIGTERM') => {
  for (const pgid of groups) {
    try {
      process.kill(-pgid, sig);
    } catch {
      groups.delete(pgid); // already gone
    }
  }
};
process.on('exit', () => killGroups('SIGKILL'));
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    killGroups('SIGKILL');
    process.exit(130);
  });
}

/** code-server in its own process group: killing the group also ends the extension host and the server. */
async function startCodeServer(profile, procEnv = env, folder = WS) {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const log = path.join(TMP, `${path.basename(profile.ud)}-code-server.log`);
  const fd = fs.openSync(log, 'w');
  const proc = spawn(process.execPath, [
    ENTRY, ...csArgs(profile.ud), '--bind-addr', `127.0.0.1:${port}`, '--auth', 'none', '--disable-telemetry',
    '--disable-update-check', '--disable-getting-started-override',
    ...(profile.trust ? ['--disable-workspace-trust'] : []), folder,
  ], { env: procEnv, detached: true, stdio: ['ignore', fd, fd] });
  groups.add(proc.pid);
  if (process.env.WARPFORGE_UI_PGID_FILE) {
    fs.appendFileSync(process.env.WARPFORGE_UI_PGID_FILE, `${proc.pid}\n`); // for the CI script's final sweep
  }
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/healthz`);
      if (r.ok) break;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error('code-server did not answer /healthz within 60 s');
    await new Promise((r) => setTimeout(r, 200));
  }
  return { ...profile, port, proc, log };
}

async function stopCodeServer(cs) {
  try {
    process.kill(-cs.proc.pid, 'SIGTERM');
  } catch {
    // gone
  }
  for (let i = 0; i < 50; i++) {
    try {
      process.kill(-cs.proc.pid, 0);
      await new Promise((r) => setTimeout(r, 100));
    } catch {
      break;
    }
  }
  try {
    process.kill(-cs.proc.pid, 'SIGKILL');
  } catch {
    // gone
  }
  groups.delete(cs.proc.pid);
}

/** A Python older than 3.11: WARPFORGE_UI_OLD_PYTHON, else one pyenv or Debian has. */
function oldPython() {
  const pyenv = path.join(os.homedir(), '.pyenv', 'versions');
  const found = [
    process.env.WARPFORGE_UI_OLD_PYTHON,
    ...(fs.existsSync(pyenv) ? fs.readdirSync(pyenv).filter((v) => /^3\.(8|9|10)\./.test(v))
      .sort((a, b) => Number(b.split('.')[1]) - Number(a.split('.')[1]))
      .map((v) => path.join(pyenv, v, 'bin', 'python3')) : []),
    '/usr/bin/python3.10', '/usr/bin/python3.9',
  ].filter((p) => p && fs.existsSync(p));
  if (!found.length) throw new Error('no Python older than 3.11 here: set WARPFORGE_UI_OLD_PYTHON');
  return found[0];
}

// ---------------------------------------------------------------------------------------------- helpers
let page;
let shotNo = 0;
async function shot(name) {
  // let notification toasts finish sliding in (wait for their boxes to stop moving)
  let prev = '';
  for (let i = 0; i < 20; i++) {
    const boxes = JSON.stringify(await toasts().evaluateAll((els) => els.map((e) => e.getBoundingClientRect().top)));
    if (boxes === prev) break;
    prev = boxes;
    await page.waitForTimeout(100);
  }
  shotNo += 1;
  const file = path.join(SHOTS, `${String(shotNo).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

async function check(name, fn) {
  const t = Date.now();
  try {
    await fn();
    passed.push(name);
    step(`PASS ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failures += 1;
    step(`FAIL ${name}: ${e && e.message ? e.message.split('\n')[0] : e}`);
    await shot(`FAIL-${name.replace(/[^a-z0-9]+/gi, '-')}`).catch(() => undefined);
    throw e;
  }
}

const toasts = () => page.locator('.notifications-toasts .notification-toast');
const toast = (text) => toasts().filter({ hasText: text });
async function dismissToasts() {
  // Close all notifications (keyboard: the pointer-block overlay of some widgets intercepts clicks).
  await runCommand('Notifications: Clear All Notifications');
  await page.locator('.notifications-toasts .notification-toast').first().waitFor({ state: 'detached', timeout: 5000 }).catch(() => undefined);
}

async function runCommand(label) {
  await page.keyboard.press('Escape');
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget .quick-input-box input');
  await input.waitFor({ state: 'visible' });
  await input.fill(`>${label}`);
  const row = page.locator('.quick-input-list .monaco-list-row', { hasText: label }).first();
  await row.waitFor({ state: 'visible', timeout: 15_000 });
  await page.keyboard.press('Enter');
}

/** The text of the visible lines of the active code editor (not the diff editor). */
async function editorText() {
  const t = await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().innerText();
  return t.replace(/\u00a0/g, ' ');
}

async function openFile(rel) {
  // Quick Open can still show the recently opened files while it searches: Enter may open another one, so
  // wait until the file's tab is the active one (and try again if it is not)
  const active = page.locator(`.tab.active[aria-label^="${path.basename(rel)}"]`).first();
  for (let attempt = 0; ; attempt++) {
    await page.keyboard.press('Escape');
    await page.keyboard.press('Control+P');
    const input = page.locator('.quick-input-widget .quick-input-box input');
    await input.waitFor({ state: 'visible' });
    await input.fill(rel);
    await page.locator('.quick-input-list .monaco-list-row.focused', { hasText: path.basename(rel) }).first().waitFor();
    await page.keyboard.press('Enter');
    try {
      await active.waitFor({ timeout: 5000 });
      break;
    } catch (e) {
      if (attempt >= 2) throw e;
    }
  }
  await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().waitFor();
}

/** Line element (in the active editor) whose text contains `text`. */
function line(text) {
  return page.locator('.editor-group-container.active .monaco-editor .view-line', { hasText: text }).first();
}

async function rightClickOptimize() {
  // put the cursor inside the kernel body, then open the editor context menu there
  const target = line('blockIdx.x * blockDim.x');
  await target.click();
  await target.click({ button: 'right' });
  const item = page.getByRole('menuitem', { name: 'Optimize Kernel' });
  await item.waitFor({ state: 'visible', timeout: 10_000 });
  await shot('context-menu');
  await item.click();
}

async function waitResult() {
  // the final notification: "N× faster saxpy (verified on deterministic fixture (no GPU), ...)"
  const t = toast('faster saxpy').filter({ hasText: 'verified on deterministic fixture (no GPU)' }).last();
  await t.waitFor({ state: 'visible', timeout: 120_000 });
  return t;
}

function outputLog(ud = current.ud) {
  const logs = path.join(ud, 'logs');
  const out = [];
  const walk = (d) => {
    for (const e of fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }) : []) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/WarpForge\.log$/.test(e.name)) out.push(fs.readFileSync(p, 'utf8'));
    }
  };
  walk(logs);
  return out.join('\n');
}

async function until(fn, what, timeout = 30_000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The language status hover (the {} beside the language mode) shows WarpForge's item with `label` and a
 *  detail matching `detail`; waits until it does (the item turns from "starting"/"analysing" to ready). */
async function languageStatus(label, detail, timeout = 60_000) {
  const deadline = Date.now() + timeout;
  let last = '';
  for (;;) {
    await page.locator('.statusbar-item[id="status.languageStatus"]').first().click();
    const hover = page.locator('.hover-language-status', { hasText: label });
    const items = await hover.allInnerTexts().catch(() => []);
    last = items.join(' | ');
    if (items.some((t) => detail.test(t) && !/starting|analysing/.test(t))) return last;
    await page.keyboard.press('Escape');
    if (Date.now() > deadline) throw new Error(`language status never showed ${label} ${detail}: ${last}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Open the workspace in a fresh browser context on `cs`. */
async function openWorkbench(cs, folder = WS) {
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  await ctx.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort());
  page = await ctx.newPage();
  page.setDefaultTimeout(30_000);
  await page.goto(`http://127.0.0.1:${cs.port}/?folder=${encodeURIComponent(folder)}`);
  await page.locator('.monaco-workbench').waitFor();
  await page.locator('.explorer-folders-view, .explorer-viewlet').first().waitFor();
  return ctx;
}

// ---------------------------------------------------------------------------------------------- review (issue 19)
// Markdown hovers, the result that outlives its toast, keyboard accept, Next Variant, lens and status bar after
// a Reject, per-change accept, and the lens setting. Jobs use the DETERMINISTIC EVALUATOR FIXTURE (see the top).

/** The Markdown part of a hint's hover: a rendered evidence table, the action and the documentation link. */
async function hoverMarkdown(hover) {
  const table = hover.locator('table').first();
  await table.waitFor({ state: 'visible', timeout: 10_000 });
  const cells = (await table.innerText()).replace(/\s+/g, ' ');
  if (!/written y/.test(cells)) throw new Error(`the evidence table lacks "written y": ${cells}`);
  const text = await hover.innerText();
  if (!/Action:/.test(text) || !/Ctrl\+\. applies a quick fix/.test(text)) throw new Error(`the hover lacks the action: ${text}`);
  if (/\{'|': \[|\*\*/.test(text)) throw new Error(`the hover shows raw Markdown or Python reprs: ${text}`);
  await hover.locator('a', { hasText: 'WF101 in the documentation' }).first().waitFor();
}

const lens = (text) => page.locator('.editor-group-container .codelens-decoration', { hasText: text }).first();
const statusItem = (text) => page.locator('.statusbar-item', { hasText: text }).first();
const searchFrame = () => page.frameLocator('iframe.webview.ready').frameLocator('#active-frame');

/** Focus a side of the visible WarpForge diff (keys apply to the focused editor). */
async function focusDiff() {
  const diff = page.locator('.monaco-diff-editor').first();
  await diff.waitFor({ state: 'visible' });
  await diff.locator('.line-insert, .char-insert').first().waitFor();
  // The variant side: shown in side-by-side and inline layouts alike (a narrow group renders the diff inline).
  // A webview that held focus a moment before (the search view's Review Diff) can take it back after the click
  // (seen once in CI: the active tab stayed "WarpForge search"), so click until the diff's group is the active one.
  await until(async () => {
    await diff.locator('.editor.modified .view-line').first().click();
    // the pointer off the diff: its gutter menus (inline layout: "Copy changed line") would take the keys
    await page.mouse.move(2, 2);
    await page.keyboard.press('Escape');
    await new Promise((r) => setTimeout(r, 150));
    return /current ↔/.test(await activeTabLabel());
  }, 'the variant diff to be the active editor', 10_000);
  return diff;
}

async function activeTabLabel() {
  return (await page.locator('.editor-group-container.active .tab.active').first().getAttribute('aria-label')) ?? '';
}

/** Set (or with undefined, remove) a setting in the remote machine's settings, which code-server watches (as the
 *  no-GPU check does; the browser-side user settings are not re-read from disk). */
async function setMachineSetting(key, value) {
  const file = path.join(current.ud, 'Machine', 'settings.json');
  const settings = JSON.parse(fs.readFileSync(file, 'utf8'));
  if (value === undefined) delete settings[key];
  else settings[key] = value;
  fs.writeFileSync(file, JSON.stringify(settings, null, 2));
}

async function reviewChecks() {
  let before;
  await check('the result persists past the toast: the lens, the status bar and the search view keep it', async () => {
    await dismissToasts();
    await runCommand('View: Close All Editors');
    await openFile('kernels/saxpy.cu');
    before = await editorText();
    await rightClickOptimize();
    const speed = ((await (await waitResult()).innerText()).match(/(\d+\.\d+)× faster saxpy/) ?? [])[1];
    await dismissToasts(); // the toast is gone: the evidence must still be somewhere
    // this job's result (not an older run's "next best"): "1.60× faster — Review"
    await page.locator('.editor-group-container .codelens-decoration', { hasText: new RegExp(`(?<!best )${speed}× faster — Review`) })
      .first().waitFor({ timeout: 30_000 });
    // the job's end refreshes the lenses: "Optimizing…" gives way to the result (it stayed in issue 19)
    await lens('Optimizing').waitFor({ state: 'detached', timeout: 15_000 })
      .catch(() => { throw new Error('the lens still says Optimizing 15 s after the job ended'); });
    await statusItem('saxpy ready').waitFor();
    await runCommand('WarpForge: Show Search');
    const result = searchFrame().locator('#result');
    await result.locator('.result-text', { hasText: 'faster saxpy' }).waitFor({ timeout: 20_000 });
    const text = await result.innerText();
    if (!/Result: \d+\.\d+× faster saxpy \(verified on deterministic fixture \(no GPU\)/.test(text)) {
      throw new Error(`the search view's result lacks the evidence: ${text}`);
    }
    for (const b of ['Review Diff', 'Accept', 'Reject', 'Next Variant']) {
      await result.locator('button', { hasText: b }).first().waitFor();
    }
    await shot('result-persists');
    await result.locator('button', { hasText: 'Review Diff' }).click();
    await page.locator('.tab', { hasText: 'current ↔' }).first().waitFor();
  });

  await check('Next Variant (Alt+]) in the diff opens the job\'s next verified variant', async () => {
    await focusDiff();
    const first = await activeTabLabel();
    if (!/current ↔/.test(first)) throw new Error(`the active tab is not a variant diff: ${first}`);
    // The key right after the diff opens can reach the workbench before the editor's context keys do (the
    // search view's webview held focus a moment before): press again, focused again, a bounded number of times.
    let second;
    for (let attempt = 1; attempt <= 3 && second === undefined; attempt++) {
      if (attempt > 1) await focusDiff();
      await page.keyboard.press('Alt+BracketRight');
      second = await until(async () => {
        const l = await activeTabLabel();
        return /current ↔/.test(l) && l !== first ? l : undefined;
      }, 'the next variant\'s diff', 8_000).catch((e) => { if (attempt === 3) throw e; return undefined; });
    }
    const speed = (l) => Number((l.match(/(\d+\.\d+)× faster variant/) ?? [])[1]);
    if (!(speed(second) <= speed(first))) throw new Error(`the next variant is not the next best: ${first} → ${second}`);
    await shot('next-variant');
  });

  await check('after Reject the lens and the status bar offer the same variant', async () => {
    // the diff shows the second best (Next Variant): rejecting it leaves the best on offer, as the result
    await focusDiff();
    await page.keyboard.press('Control+Shift+Backspace');
    await toast('rejected the').first().waitFor();
    const item = statusItem('saxpy ready');
    await item.waitFor({ timeout: 20_000 });
    const l = page.locator('.editor-group-container .codelens-decoration', { hasText: /× faster — Review/ }).first();
    await l.waitFor({ timeout: 20_000 });
    const agree = async () => {
      const bar = (await item.innerText()).match(/(next best )?(\d+\.\d+)× saxpy ready/);
      const onLens = (await l.innerText()).match(/(next best )?(\d+\.\d+)× faster — Review/);
      return bar && onLens && bar[1] === onLens[1] && bar[2] === onLens[2] ? bar : undefined;
    };
    const both = await until(agree, 'the status bar and the lens to agree', 20_000)
      .catch(async () => { throw new Error(`status bar and lens disagree: ${await item.innerText()} / ${await l.innerText()}`); });
    if (both[1]) throw new Error(`a slower variant was rejected, yet the best is offered as the next best: ${both[0]}`);
    await shot('reject-same-offer');
    if ((await editorText()) !== before) throw new Error('Reject changed the buffer');
  });

  await check('per-change accept: Accept Some Changes… — the server refuses a change that breaks the pair, applies the picked set', async () => {
    await dismissToasts();
    await lens('faster — Review').locator('a', { hasText: 'Review' }).first().click();
    await focusDiff();
    // pick changes in the list: `which` = the row numbers to tick (1-based), then OK
    const pick = async (which) => {
      await runCommand('WarpForge: Accept Some Changes…');
      const rows = page.locator('.quick-input-list .monaco-list-row', { hasText: /Change \d+ of/ });
      await rows.first().waitFor({ timeout: 15_000 });
      const total = await rows.count();
      for (const n of which === 'all' ? [...Array(total).keys()].map((i) => i + 1) : which) {
        await rows.nth(n - 1).click(); // multi-select: a click ticks the row's box
      }
      await shot(`accept-some-changes-${which === 'all' ? 'all' : which.join('-')}`);
      await page.locator('.quick-input-widget .monaco-button', { hasText: 'OK' }).first().click();
      return total;
    };
    // saxpy's best variant changes its launch (grid / 4) with its kernel: one change alone is refused, with why
    const total = await pick([1]);
    const refused = toast('not applied');
    await refused.first().waitFor({ timeout: 30_000 });
    const why = await refused.first().innerText();
    if (!/changes its launch/.test(why)) throw new Error(`the refusal does not say why: ${why}`);
    if (await page.locator('.tab.dirty[aria-label^="saxpy.cu"]').count()) throw new Error('a refused change reached the buffer');
    await shot('change-refused');
    await dismissToasts();
    await focusDiff();
    // every change picked one by one: applied through the same path
    await pick('all');
    const done = toast('changes of the variant of saxpy');
    await done.first().waitFor({ timeout: 30_000 });
    const msg = await done.first().innerText();
    if (!new RegExp(`applied ${total} of the ${total} changes`).test(msg) || !/not measured/.test(msg)) {
      throw new Error(`unexpected message: ${msg}`);
    }
    await page.locator('.tab.active[aria-label^="saxpy.cu"]').waitFor();
    await until(async () => (await editorText()) !== before, 'the buffer to change');
    await shot('accepted-changes');
    // acted on: no variant is offered any more, on the lens or in the status bar
    await lens('— Review').waitFor({ state: 'detached', timeout: 20_000 });
    if (await statusItem('saxpy ready').count()) throw new Error('the status bar still offers a variant');
    await line('blockIdx.x').click();
    await page.keyboard.press('Control+Z');
    await until(async () => (await editorText()) === before, 'undo to restore the original text');
  });

  await check('keyboard accept: Ctrl+Shift+Enter in the diff applies the variant', async () => {
    await dismissToasts();
    await rightClickOptimize();
    await waitResult().then((t) => t.locator('.monaco-button', { hasText: 'View Diff' }).click());
    await focusDiff();
    await page.keyboard.press('Control+Shift+Enter');
    await toast('applied the').first().waitFor();
    await page.locator('.tab.active[aria-label^="saxpy.cu"]').waitFor();
    await until(async () => (await editorText()) !== before, 'the buffer to change');
    await shot('accepted-by-key');
    await line('blockIdx.x').click();
    await page.keyboard.press('Control+Z');
    await until(async () => (await editorText()) === before, 'undo to restore the original text');
  });

  await check('settings: warpforge.codeLens.enabled off removes the lenses, on brings them back', async () => {
    await dismissToasts();
    await runCommand('View: Close All Editors');
    await openFile('kernels/saxpy.cu');
    const optimizeLens = () => page.locator('.editor-group-container.active .codelens-decoration', { hasText: 'Optimize' }).first();
    await optimizeLens().waitFor({ timeout: 30_000 });
    await setMachineSetting('warpforge.codeLens.enabled', false);
    try {
      await until(async () => (await page.locator('.editor-group-container.active .codelens-decoration', { hasText: 'Optimize' }).count()) === 0,
        'the lenses to go with warpforge.codeLens.enabled = false', 30_000);
      await shot('lenses-off');
    } finally {
      await setMachineSetting('warpforge.codeLens.enabled', undefined);
    }
    await line('blockIdx.x').click();
    await optimizeLens().waitFor({ timeout: 30_000 });
  });
}

// ---------------------------------------------------------------------------------------------- the test
let browser;
let current;
const sessions = [];
try {
  step(`installing ${path.relative(REPO, VSIX)} (${TMP})`);
  const inst = spawnSync(process.execPath, [ENTRY, ...csArgs(path.join(TMP, 'install')), '--install-extension', VSIX, '--force'],
    { env, encoding: 'utf8' });
  if (inst.status !== 0) {
    console.error(inst.stdout, inst.stderr);
    throw new Error('installing the .vsix failed');
  }
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  // ---- the .vsix alone: a fresh profile and a clean interpreter (a venv without even pip) that cannot import
  // anything but the standard library. It is named in warpforge.pythonPath: VS Code resolves the login
  // shell's environment for the extension host, so a PATH set here would not decide which python3 runs.
  const CLEAN = path.join(TMP, 'clean-python');
  const base = process.env.WARPFORGE_UI_CLEAN_PYTHON ?? '/usr/bin/python3';
  const venv = spawnSync(base, ['-m', 'venv', '--without-pip', CLEAN], { encoding: 'utf8' });
  if (venv.status !== 0) throw new Error(`could not make a clean venv from ${base}: ${venv.stderr}`);
  const cleanPython = path.join(CLEAN, 'bin', 'python3');
  for (const m of ['warpforge', 'numpy', 'pygls', 'tree_sitter', 'pip']) {
    const r = spawnSync(cleanPython, ['-P', '-c', `import ${m}`], { encoding: 'utf8', env: { PATH: process.env.PATH } });
    if (r.status === 0) throw new Error(`the clean interpreter ${cleanPython} imports ${m}`);
  }
  const cleanEnv = { ...env, PIP_NO_INDEX: '1' };
  delete cleanEnv.PYTHONPATH;
  current = await startCodeServer(makeProfile('fresh', { machine: { 'warpforge.pythonPath': cleanPython } }), cleanEnv);
  sessions.push(current);
  step(`code-server up on 127.0.0.1:${current.port} (fresh profile, clean ${base} venv, the .vsix alone)`);
  let ctx = await openWorkbench(current);
  await check('the .vsix alone, a clean interpreter: the bundled server starts and hints appear', async () => {
    const t0 = Date.now();
    await openFile('kernels/saxpy.cu');
    await page.locator('.editor-group-container.active .squiggly-info').first().waitFor({ timeout: 240_000 });
    const firstHint = (Date.now() - t0) / 1000;
    step(`TIME first hint ${firstHint.toFixed(1)} s after opening saxpy.cu (fresh profile, bundled server, first start compiles its byte code)`);
    const procs = serverProcesses();
    if (procs.length !== 1) throw new Error(`expected one warpforge serve, found ${procs.length}`);
    const [p] = procs;
    if (p.argv[0] !== cleanPython) {
      throw new Error(`the server runs ${p.argv[0]}, not the clean interpreter`);
    }
    const pythonPath = (p.env.find((e) => e.startsWith('PYTHONPATH=')) ?? '').slice('PYTHONPATH='.length).split(path.delimiter);
    if (!pythonPath[0].startsWith(fs.realpathSync(EXT)) && !pythonPath[0].startsWith(EXT)) {
      throw new Error(`the server's PYTHONPATH does not start in the installed extension: ${pythonPath.join(':')}`);
    }
    if (!/bundled[\\/]libs-cp3\d+$/.test(pythonPath[0]) || !/bundled[\\/]libs$/.test(pythonPath[1])) {
      throw new Error(`the server's PYTHONPATH is not the bundle's: ${pythonPath.join(':')}`);
    }
    if (!/warpforge \S+ bundled for linux-x64/.test(outputLog())) throw new Error('the output does not say the bundled server started');
    await shot('fresh-install-hints');
  });
  await check('the .vsix alone: SASS hints from the bundled nvdisasm; the language status item is neutral once hints are up', async () => {
    // nvdisasm is not on this machine's PATH and the clean interpreter has no nvidia wheel: a SASS finding
    // (WF104: scalar LDG/STG in the disassembly) can only come from the nvdisasm the .vsix carries
    await page.keyboard.press('Control+Shift+M');
    const problems = page.locator('.markers-panel .monaco-list-row');
    await problems.filter({ hasText: 'WF101' }).first().waitFor();
    if (HAVE_NVCC) await problems.filter({ hasText: 'WF104' }).first().waitFor({ timeout: 120_000 });
    await languageStatus('WarpForge', /hints up to date/);
    await shot('language-status');
    await page.keyboard.press('Escape');
  });
  await check('Install GPU Support: pycuda by its pinned name, and a failure that says what, where the log is and what to do', async () => {
    // No package index here (PIP_NO_INDEX): pip fails at once, with the extension's bundled pip (the clean
    // venv has none). The message must name the exact pin, pip's log file and the things to check.
    const pin = JSON.parse(fs.readFileSync(path.join(REPO, 'extension/src/bundle.json'), 'utf8')).pycuda;
    await runCommand('WarpForge: Install GPU Support (pycuda)');
    const err = toast(`installing ${pin} for`).filter({ hasText: 'failed' }).first();
    await err.waitFor({ timeout: 120_000 });
    const text = await err.innerText();
    const log = /pip's log: (\S+\.log)/.exec(text)?.[1];
    if (!log || !fs.existsSync(log)) throw new Error(`no pip log named in: ${text}`);
    if (!fs.readFileSync(log, 'utf8').includes(`install --target`) || !/No matching distribution|Could not find a version/.test(text)) {
      throw new Error(`the failure does not say what pip did: ${text}`);
    }
    if (!/nvcc/.test(text) || /pip install warpforge/.test(text)) throw new Error(`no advice (or the old advice) in: ${text}`);
    for (const b of ['Open pip Log', 'Retry', 'Copy Command']) await err.locator('.monaco-button', { hasText: b }).waitFor();
    await shot('gpu-support-install-failed');
  });
  await ctx.close();
  await stopCodeServer(current);

  current = await startCodeServer(makeProfile('trusted'));
  sessions.push(current);
  step(`code-server up on 127.0.0.1:${current.port} (trusted workspace)`);
  ctx = await openWorkbench(current);
  step('workbench loaded');

  await check('hints: squiggles, hover, Problems panel', async () => {
    await openFile('kernels/saxpy.cu');
    await page.locator('.editor-group-container.active .squiggly-info').first().waitFor({ timeout: 60_000 });
    const language = await page.locator('.statusbar-item[id="status.editor.mode"]').innerText();
    if (!/CUDA C\+\+/.test(language)) throw new Error(`language mode is ${language}`);
    await page.locator('.editor-group-container.active .codelens-decoration', { hasText: 'Optimize' }).first().waitFor();
    // hover the squiggle on the kernel's parameter list: the diagnostic with its evidence and code link
    // (mouse at the squiggle's box: Playwright's hover() would scroll Monaco's overlay layer and garble it)
    const sbox = await page.locator('.editor-group-container.active .squiggly-info').first().boundingBox();
    await page.mouse.move(sbox.x + sbox.width / 2, sbox.y + sbox.height / 2);
    const hover = page.locator('.monaco-hover:not(.hidden)', { hasText: 'WF101' }).first();
    await hover.waitFor({ state: 'visible', timeout: 15_000 });
    const text = await hover.innerText();
    if (!/__restrict__/.test(text)) throw new Error(`hover lacks the finding: ${text}`);
    // clangd-style: the diagnostic is a short headline ('x' is only read but lacks '__restrict__'), the
    // explanation (why nvcc must assume aliasing) is the hover's own Markdown
    if (!/'x' is only read but lacks '__restrict__'/.test(text)) throw new Error(`hover lacks the headline: ${text}`);
    if (!/read-only data cache/.test(text)) throw new Error(`hover lacks the explanation: ${text}`);
    // the Markdown hover: the evidence as a table, the action, the documentation link
    await hoverMarkdown(hover);
    await shot('hint-hover');
    await page.keyboard.press('Escape');
    await page.keyboard.press('Control+Shift+M');
    const problems = page.locator('.markers-panel .monaco-list-row');
    await problems.filter({ hasText: 'WF101' }).first().waitFor(); // from the source
    const rows = await problems.allInnerTexts();
    if (rows.some((r) => r.includes('`'))) throw new Error(`a diagnostic shows raw backticks: ${rows.join(' | ')}`);
    if (HAVE_NVCC) await problems.filter({ hasText: 'WF104' }).first().waitFor(); // from the SASS
    await shot('problems-panel');
  });

  await check('quick fix from a hint: applied, then undone', async () => {
    // put the cursor on the WF101 squiggle and open the quick-fix menu (choose with the keyboard)
    const sq = page.locator('.editor-group-container.active .squiggly-info').first();
    const box = await sq.boundingBox();
    await page.mouse.click(box.x + 4, box.y + box.height / 2);
    await page.keyboard.press('Control+.');
    const fix = page.locator('.action-widget .monaco-list-row', { hasText: '__restrict__' }).first();
    await fix.waitFor({ state: 'visible', timeout: 15_000 });
    await shot('quick-fix-menu');
    // apply it (the fix is the menu's first, preferred entry), see the edit, then undo it so the
    // optimize runs below start from the original text
    await page.locator('.action-widget .monaco-list-row.focused', { hasText: '__restrict__' }).waitFor();
    await page.keyboard.press('Enter');
    await line('__restrict__').waitFor();
    await page.locator('.tab.active.dirty').waitFor();
    await page.keyboard.press('Control+Z');
    await line('__restrict__').waitFor({ state: 'detached' });
  });

  await check('status bar: where variants are measured (the fixture evaluator here)', async () => {
    const item = page.locator('.statusbar-item', { hasText: 'plug-in evaluator' }).first();
    await item.waitFor({ state: 'visible', timeout: 30_000 });
  });

  await check('right-click → Profile Kernel: no GPU here, so a warning says so before anything starts', async () => {
    const target = line('blockIdx.x * blockDim.x');
    await target.click();
    await target.click({ button: 'right' });
    const item = page.getByRole('menuitem', { name: 'Profile Kernel' });
    await item.waitFor({ state: 'visible', timeout: 10_000 });
    await item.hover();
    await page.keyboard.press('Enter');
    const warn = toast('Profiling saxpy needs an NVIDIA GPU').filter({ hasText: 'Nothing was started' }).last();
    await warn.waitFor({ state: 'visible', timeout: 30_000 });
    for (const b of ['Remote-SSH Guide', 'Set Ray Address', 'GPU Details']) {
      await warn.locator('.monaco-button', { hasText: b }).waitFor();
    }
    await shot('profile-no-gpu');
    await until(() => /GPU status: plug-in evaluator/.test(outputLog()), 'the GPU status in the output');
    if (/: profiling saxpy/.test(outputLog())) throw new Error('a profile job started without a GPU');
    await dismissToasts();
  });

  await check('no GPU with the local backend: a neutral status bar item says hints only, and Optimize warns, starting nothing', async () => {
    const machine = path.join(current.ud, 'Machine', 'settings.json');
    const saved = fs.readFileSync(machine, 'utf8');
    fs.writeFileSync(machine, JSON.stringify({ ...JSON.parse(saved), 'warpforge.evaluationBackend': 'local' }, null, 2));
    try {
      const item = page.locator('.statusbar-item', { hasText: 'WarpForge: hints only (no GPU)' }).first();
      await item.waitFor({ state: 'visible', timeout: 30_000 });
      // neutral, not warning-coloured: a machine used for hints only is not in trouble
      if (/\b(warning|error)-kind\b/.test((await item.getAttribute('class')) ?? '')) {
        throw new Error('the no-GPU status bar item is warning-coloured');
      }
      await rightClickOptimize();
      const warn = toast('Optimizing saxpy needs an NVIDIA GPU').filter({ hasText: 'Nothing was started' }).last();
      await warn.waitFor({ state: 'visible', timeout: 30_000 });
      await shot('optimize-no-gpu');
      if (/: optimizing saxpy/.test(outputLog())) throw new Error('an optimize job started without a GPU');
      await dismissToasts();
    } finally {
      fs.writeFileSync(machine, saved);
    }
    await page.locator('.statusbar-item', { hasText: 'plug-in evaluator' }).first().waitFor({ state: 'visible', timeout: 30_000 });
  });

  let firstJobTree;
  await check('right-click → Optimize Kernel: progress, then the verified result', async () => {
    await page.keyboard.press('Control+J'); // close the panel for room
    await rightClickOptimize();
    const progress = toast('WarpForge: optimizing saxpy');
    await progress.waitFor({ state: 'visible', timeout: 15_000 });
    await until(async () => /round|candidates|baseline|starting/.test(await progress.innerText().catch(() => '')), 'a progress message');
    await shot('optimize-progress');
    const result = await waitResult();
    await shot('optimize-result');
    firstJobTree = await result.innerText();
    if (!/View Diff/.test(firstJobTree) || !/Accept/.test(firstJobTree) || !/Reject/.test(firstJobTree)) {
      throw new Error(`result notification lacks its buttons: ${firstJobTree}`);
    }
  });

  await check('View Diff, then Accept in the diff title bar: the buffer changes, Undo restores it', async () => {
    const before = await editorText();
    await waitResult().then((t) => t.locator('.monaco-button', { hasText: 'View Diff' }).click());
    const diff = page.locator('.editor-group-container.active .monaco-diff-editor');
    await diff.waitFor({ state: 'visible' });
    await page.locator('.tab.active', { hasText: 'current ↔' }).waitFor();
    await diff.locator('.line-insert, .char-insert').first().waitFor();
    const accept = page.locator('.editor-group-container.active .editor-actions [aria-label^="Accept Variant"]');
    await page.locator('.editor-group-container.active .editor-actions [aria-label^="Reject Variant"]').waitFor();
    await accept.waitFor();
    // labelled buttons, not bare ✓/✕ icons
    if (!/Accept Variant/.test(await accept.innerText())) throw new Error('the Accept button has no label');
    await shot('variant-diff');
    await accept.click();
    await toast('applied the').first().waitFor();
    await diff.waitFor({ state: 'detached' });
    await page.locator('.tab.active[aria-label^="saxpy.cu"]').waitFor();
    const after = await until(async () => {
      const t = await editorText();
      return t !== before ? t : undefined;
    }, 'the buffer to change');
    if (!/float4|alignas|__launch_bounds__|__restrict__/.test(after)) throw new Error(`accepted buffer is not a variant: ${after}`);
    await page.locator('.tab.active.dirty').waitFor(); // edited, not saved
    await shot('accepted-buffer');
    await line('blockIdx.x').click();
    await page.keyboard.press('Control+Z');
    await until(async () => (await editorText()) === before, 'undo to restore the original text');
  });

  await check('search view: tree, plot, click a node to open its diff', async () => {
    await dismissToasts();
    await runCommand('WarpForge: Show Search');
    const frame = page.frameLocator('iframe.webview.ready').frameLocator('#active-frame');
    await frame.locator('#tree li.node').first().waitFor({ timeout: 20_000 });
    await frame.locator('#plot svg path.curve').waitFor();
    const labels = await frame.locator('#tree .label').allInnerTexts();
    if (labels.length < 2) throw new Error(`tree has ${labels.length} nodes`);
    if (!labels.some((l) => /ok/.test(l) && /×/.test(l))) throw new Error(`no verified node with a speedup: ${labels.join(' | ')}`);
    await shot('search-view-dark');
    await frame.locator('#tree .label:not([disabled])', { hasText: '★ best' }).first().click();
    await page.locator('.monaco-diff-editor').first().waitFor({ state: 'visible' });
    await page.locator('.tab', { hasText: 'current ↔' }).first().waitFor();
    await shot('search-node-diff');
    // the same view in the light theme (it uses the theme's CSS variables only)
    await runCommand('Preferences: Toggle between Light/Dark Themes');
    await page.locator('.monaco-workbench.vs').waitFor({ timeout: 15_000 });
    await frame.locator('#tree li.node').first().waitFor();
    await shot('search-view-light');
    await runCommand('Preferences: Toggle between Light/Dark Themes');
    await page.locator('.monaco-workbench.vs-dark').waitFor({ timeout: 15_000 });
    await runCommand('View: Close All Editors');
  });

  await check('second run: Reject keeps the file unchanged', async () => {
    await dismissToasts();
    await openFile('kernels/saxpy.cu');
    const before = await editorText();
    await rightClickOptimize();
    const result = await waitResult();
    await result.locator('.monaco-button', { hasText: 'Reject' }).click();
    await toast('rejected the').first().waitFor();
    await shot('rejected');
    if ((await editorText()) !== before) throw new Error('Reject changed the buffer');
    if (await page.locator('.tab.active.dirty').count()) throw new Error('Reject left the file modified');
  });

  await check('keyboard review: Ctrl+Shift+Backspace in the diff rejects the variant, the file stays as it was', async () => {
    await dismissToasts();
    await openFile('kernels/saxpy.cu');
    const before = await editorText();
    await rightClickOptimize();
    await waitResult().then((t) => t.locator('.monaco-button', { hasText: 'View Diff' }).click());
    const diff = page.locator('.editor-group-container.active .monaco-diff-editor');
    await diff.waitFor({ state: 'visible' });
    await diff.locator('.line-insert, .char-insert').first().waitFor();
    await diff.locator('.view-line').first().click(); // focus a side of the diff
    await page.keyboard.press('Control+Shift+Backspace');
    await toast('rejected the').first().waitFor();
    await diff.waitFor({ state: 'detached' });
    await shot('rejected-by-key');
    if ((await editorText()) !== before) throw new Error('the keyboard Reject changed the buffer');
  });

  await reviewChecks();

  await check('Cancel from the progress notification reaches the server', async () => {
    await dismissToasts();
    // a budget the job cannot spend before the click: with 12 candidates it sometimes finished first on a
    // busy machine, and there was nothing left to cancel
    const userSettings = fs.readFileSync(current.settingsFile, 'utf8');
    fs.writeFileSync(current.settingsFile, JSON.stringify({ ...JSON.parse(userSettings), 'warpforge.budget': 400 }, null, 2));
    await page.waitForTimeout(3000); // the settings file is watched; the client pushes the change to the server
    await rightClickOptimize();
    const progress = toast('WarpForge: optimizing saxpy');
    await progress.waitFor({ state: 'visible', timeout: 15_000 });
    await progress.locator('.monaco-button', { hasText: 'Cancel' }).click();
    // the server ends the job as cancelled: either nothing verified yet, or its best so far
    await page.locator('.notifications-toasts .notification-toast', { hasText: /optimization of saxpy cancelled|cancelled, best so far/ })
      .first().waitFor({ timeout: 60_000 });
    await shot('cancelled');
    await until(() => /job-\d+: cancelled after/.test(outputLog()), 'the jobDone(cancelled) line in the WarpForge output', 15_000);
    fs.writeFileSync(current.settingsFile, userSettings);
  });

  await check('Set API Key: secret storage, sent to the server, never in settings', async () => {
    await dismissToasts();
    const key = 'sk-ant-ui-test-0123456789';
    await runCommand('WarpForge: Set API Key');
    const input = page.locator('.quick-input-widget .quick-input-box input');
    await input.waitFor({ state: 'visible' });
    if ((await input.getAttribute('type')) !== 'password') throw new Error('the key input is not a password box');
    await input.fill(key);
    await shot('api-key-input');
    await page.keyboard.press('Enter');
    await toast('API key stored').first().waitFor();
    await until(() => /API key changed: settings sent to the server/.test(outputLog()), 'the client to send the key', 15_000);
    // Restart Server: the fresh server gets the key in initializationOptions (it logs only that one is set)
    await runCommand('WarpForge: Restart Server');
    await toast('server restarted').first().waitFor({ timeout: 30_000 });
    const log = await until(() => {
      const l = outputLog();
      return (l.match(/settings: \{[^\n]*'api_key': 'set'/g) ?? []).length >= 1 ? l : undefined;
    }, 'the restarted server to log api_key set', 20_000);
    if (log.includes(key)) throw new Error('the API key appears in the output log');
    if (fs.readFileSync(current.settingsFile, 'utf8').includes(key)) throw new Error('the API key is in settings.json');
    await shot('api-key-stored');
  });
  await check('an interpreter older than 3.11: an error that names its version and what to do, no pip advice', async () => {
    await dismissToasts();
    const python = oldPython();
    fs.writeFileSync(path.join(current.ud, 'Machine', 'settings.json'), JSON.stringify({
      'warpforge.pythonPath': python,
      'warpforge.evaluationBackend': 'python:lsp_fixture_evaluator:make',
    }, null, 2));
    const err = toast(`${python} is Python 3.`).first();
    await err.waitFor({ timeout: 30_000 });
    const text = await err.innerText();
    if (!/WarpForge needs Python 3\.11 or newer/.test(text) || !/warpforge\.pythonPath/.test(text)) throw new Error(`no version or advice in: ${text}`);
    if (/pip install|Install in Terminal/.test(text)) throw new Error(`the old install advice is back: ${text}`);
    for (const b of ['Open Settings', 'Show Output']) {
      await err.locator('.monaco-button', { hasText: b }).waitFor();
    }
    await shot('old-python');
  });

  // Restricted Mode: a fresh profile with workspace trust on and the folder not trusted.
  await ctx.close();
  await stopCodeServer(current);
  current = await startCodeServer(makeProfile('restricted', { trust: false }));
  sessions.push(current);
  step(`code-server up on 127.0.0.1:${current.port} (workspace NOT trusted)`);
  ctx = await openWorkbench(current);
  await check('Restricted Mode: hints still work, Optimize Kernel is refused with an explanation', async () => {
    await page.locator('.statusbar-item', { hasText: 'Restricted Mode' }).first().waitFor();
    await openFile('kernels/saxpy.cu');
    await page.locator('.editor-group-container.active .squiggly-info').first().waitFor({ timeout: 60_000 });
    await rightClickOptimize();
    const warn = toast('disabled in Restricted Mode');
    await warn.first().waitFor();
    await warn.first().locator('.monaco-button', { hasText: 'Manage Workspace Trust' }).waitFor();
    await shot('restricted-mode');
    if (/job-\d+: optimizing/.test(outputLog())) throw new Error('a job started in Restricted Mode');
    // The server's own notice, once: what is off and how to turn it on.
    await toast('hints come from source patterns only').first().waitFor({ timeout: 30_000 });
    if (!/workspace not trusted: nothing is compiled/.test(outputLog())) throw new Error('the client did not start the server untrusted');
  });
  await check('Restricted Mode: the server runs with -P, PYTHONSAFEPATH=1 outside the workspace; no workspace module ran', async () => {
    const procs = serverProcesses();
    if (procs.length === 0) throw new Error('no warpforge serve process found');
    const ws = fs.realpathSync(WS);
    for (const p of procs) {
      if (!p.argv.includes('-P')) throw new Error(`server ${p.pid} started without -P: ${p.argv.join(' ')}`);
      if (!p.env.includes('PYTHONSAFEPATH=1')) throw new Error(`server ${p.pid} has no PYTHONSAFEPATH=1`);
      if (p.cwd === ws || p.cwd.startsWith(ws + path.sep)) throw new Error(`server ${p.pid} runs in the workspace (${p.cwd})`);
    }
    if (fs.existsSync(PWNED)) throw new Error(`a workspace module was imported: ${fs.readFileSync(PWNED, 'utf8')}`);
  });
  await ctx.close();
  await stopCodeServer(current);

  // ---- a multi-file CUDA project (issue 29's "done when"), the .vsix alone with the clean interpreter:
  // tests/projects/ui_multi (headers in include/, a typedef'd element type, an enum parameter, a kernel
  // launched only from src/main.cu, a CMake build that writes compile_commands.json when configured).
  if (HAVE_NVCC) {
    const PROJ = path.join(TMP, 'ui_multi');
    fs.cpSync(path.join(REPO, 'tests/projects/ui_multi'), PROJ, { recursive: true });
    current = await startCodeServer(makeProfile('project', { machine: { 'warpforge.pythonPath': cleanPython } }), cleanEnv, PROJ);
    sessions.push(current);
    step(`code-server up on 127.0.0.1:${current.port} (multi-file project, the .vsix alone)`);
    ctx = await openWorkbench(current, PROJ);
    const errors = () => page.locator('.editor-group-container.active .squiggly-error');
    /** The Problems panel's rows, once a row with `ready` is there (the panel fills after it opens). */
    const problemRows = async (ready) => {
      await page.keyboard.press('Escape');
      await page.keyboard.press('Control+Shift+M');
      const rows = page.locator('.markers-panel .monaco-list-row');
      await rows.filter({ hasText: ready }).first().waitFor({ timeout: 60_000 });
      return rows.allInnerTexts();
    };
    await check('project, build not configured: the missing header is an error on its #include, nothing else is red', async () => {
      await openFile('src/kernels.cu');
      await page.locator('.editor-group-container.active .squiggly-info').first().waitFor({ timeout: 240_000 });
      await errors().first().waitFor({ timeout: 120_000 });
      await languageStatus('WarpForge', /hints up to date/);
      const rows = await problemRows('WF000');
      const wf000 = rows.filter((r) => r.includes('WF000'));
      if (wf000.length !== 1 || !/real\.h/.test(wf000[0]) || !/Ln 2\b/.test(wf000[0])) {
        throw new Error(`expected one error, real.h on line 2: ${rows.join(' | ')}`);
      }
      if (rows.some((r) => /compilation terminated/.test(r))) throw new Error(`nvcc's last line reported: ${rows.join(' | ')}`);
      await shot('project-missing-header');
    });
    await check('project: the quick fix on the #include writes warpforge.toml with include/, and the error clears', async () => {
      await line('#include "real.h"').click();
      await page.keyboard.press('Control+.');
      const fix = page.locator('.action-widget .monaco-list-row', { hasText: 'include folder include/' }).first();
      await fix.waitFor({ state: 'visible', timeout: 15_000 });
      await shot('project-header-quick-fix');
      await page.locator('.action-widget .monaco-list-row.focused', { hasText: 'include folder include/' }).waitFor();
      await page.keyboard.press('Enter');
      const toml = path.join(PROJ, 'warpforge.toml');
      await until(() => fs.existsSync(toml) && /include\s*=\s*\[\s*"include"\s*\]/.test(fs.readFileSync(toml, 'utf8')),
        'warpforge.toml with include = ["include"] on disk');
      await openFile('src/kernels.cu');
      await errors().first().waitFor({ state: 'detached', timeout: 120_000 });
      await page.locator('.editor-group-container.active .squiggly-info').first().waitFor();
    });
    await check('project: saving an edited header refreshes the hints of the file that includes it', async () => {
      await openFile('include/blend.cuh');
      await line('x + a;').click();
      await page.keyboard.press('End');
      for (let i = 0; i < 'x + a;'.length - 'x + '.length; i++) await page.keyboard.press('Backspace');
      await page.keyboard.type('undefined_in_header;');
      await page.keyboard.press('Control+S');
      await page.locator('.tab.active.dirty').waitFor({ state: 'detached' });
      await openFile('src/kernels.cu');
      await errors().first().waitFor({ timeout: 120_000 });
      const rows = await problemRows('undefined_in_header');
      if (!rows.some((r) => /undefined_in_header/.test(r) && /blend\.cuh/.test(r))) {
        throw new Error(`no error from the edited header in kernels.cu's hints: ${rows.join(' | ')}`);
      }
      await shot('project-header-edit');
      await openFile('include/blend.cuh');
      await line('undefined_in_header;').click();
      await page.keyboard.press('End');
      for (let i = 0; i < 'undefined_in_header;'.length; i++) await page.keyboard.press('Backspace');
      await page.keyboard.type('a;');
      await line('x + a;').waitFor();
      await page.keyboard.press('Control+S');
      await page.locator('.tab.active.dirty').waitFor({ state: 'detached' });
      await openFile('src/kernels.cu');
      await errors().first().waitFor({ state: 'detached', timeout: 120_000 });
    });
    await check('project: after cmake writes build/compile_commands.json (no warpforge.toml), no false error', async () => {
      fs.rmSync(path.join(PROJ, 'warpforge.toml'));
      await errors().first().waitFor({ timeout: 120_000 }); // the header is unknown again
      const cm = spawnSync('cmake', ['-S', '.', '-B', 'build', '-DCMAKE_EXPORT_COMPILE_COMMANDS=ON'], { cwd: PROJ, encoding: 'utf8' });
      if (cm.status !== 0) throw new Error(`cmake failed: ${cm.stdout}\n${cm.stderr}`);
      if (!fs.existsSync(path.join(PROJ, 'build', 'compile_commands.json'))) throw new Error('cmake wrote no compile_commands.json');
      await errors().first().waitFor({ state: 'detached', timeout: 120_000 });
      await page.locator('.editor-group-container.active .squiggly-info').first().waitFor();
      let rows = await problemRows('WF101');
      // cmake writes build/ in several steps and the watcher reports each: an analysis started on an earlier
      // event may still be publishing when the squiggle has gone. What must hold is that no error *stays*:
      // poll the panel until it has none, and report the rows it kept if one does.
      const seen = rows.some((r) => r.includes('WF000'));
      try {
        await until(async () => {
          rows = await page.locator('.markers-panel .monaco-list-row').allInnerTexts();
          return !rows.some((r) => r.includes('WF000'));
        }, 'no WF000 row in the Problems panel', 60_000);
      } catch {
        throw new Error(`an error remains: ${rows.join(' | ')}`);
      }
      if (seen) step(`a WF000 row showed after the squiggle cleared and went away by itself: ${rows.join(' | ')}`);
      await shot('project-configured');
    });
    await check('project: Add benchmark spec fills sizes and scalars from main.cu\'s launch, guesses marked', async () => {
      await page.keyboard.press('Escape');
      await lens('Add benchmark spec').click();
      await line('@warpforge').waitFor({ timeout: 60_000 });
      const text = await editorText();
      const block = text.split('\n').filter((l) => l.includes('warpforge') || l.includes('guessed'));
      if (!block.some((l) => l.includes('1 << 22'))) throw new Error(`the size is not main.cu's 1 << 22: ${block.join(' / ')}`);
      if (!block.some((l) => /\b0\.5f?\b/.test(l))) throw new Error(`the scalar is not main.cu's 0.5f: ${block.join(' / ')}`);
      if (block.some((l) => /arg op(: *\w+)? *= *-?\d*\.\d|arg op: *(float|double)/.test(l))) throw new Error(`the enum parameter op is given a float: ${block.join(' / ')}`);
      const placeholders = block.filter((l) => /1 << 20|= 1\.0\b/.test(l) && !/guessed/.test(l));
      if (placeholders.length) throw new Error(`placeholder values not marked // guessed: ${placeholders.join(' / ')}`);
      await shot('project-add-spec');
    });
    await ctx.close();
    await stopCodeServer(current);
  } else {
    step('SKIP the multi-file project checks: no nvcc here (the missing-header and SASS checks need it)');
  }
} catch (e) {
  if (failures === 0) {
    failures += 1;
    step(`ERROR ${e && e.stack ? e.stack : e}`);
    if (page) await shot('ERROR').catch(() => undefined);
  }
} finally {
  await browser?.close().catch(() => undefined);
  for (const cs of sessions) await stopCodeServer(cs);
  const out = sessions.map((cs) => `==== ${path.basename(cs.ud)} ====\n${outputLog(cs.ud)}`).join('\n');
  fs.writeFileSync(path.join(SHOTS, 'warpforge-output.log'), out);
  if (failures) {
    console.log('---- WarpForge output channel (tail) ----');
    console.log(out.split('\n').slice(-60).join('\n'));
    for (const cs of sessions) {
      console.log(`---- code-server log ${path.basename(cs.log)} (tail) ----`);
      console.log(fs.readFileSync(cs.log, 'utf8').split('\n').slice(-20).join('\n'));
    }
  }
  if (!KEEP) fs.rmSync(TMP, { recursive: true, force: true });
  console.log(`[ui ${since()} s] ${passed.length} passed, ${failures} failed; screenshots in ${path.relative(REPO, SHOTS)}/`);
  process.exitCode = failures ? 1 : 0;
}

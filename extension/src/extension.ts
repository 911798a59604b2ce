// WarpForge for VS Code: a thin client of the Python language server `warpforge serve`.
//
// The server does the work (hints as diagnostics, code lenses, code actions and quick fixes, optimize jobs
// with progress, verified variants, accept through workspace/applyEdit). The client starts it, adds the
// editor UI around jobs (progress notification, diff view, Accept/Reject, search view), keeps the API key
// in the secret store, and keeps optimization off in untrusted workspaces.
import * as vscode from 'vscode';
import { AnalysisStatusItem } from './analysisStatus';
import { GpuStatusItem } from './gpuStatus';
import { GpuSupport } from './gpuSupport';
import { explainRestricted, Jobs } from './jobs';
import { kernelAt } from './kernel';
import { onPythonInterpreterChange } from './python';
import { Cmd } from './protocol';
import { SearchView } from './searchView';
import { errorText, Server, ServerHooks } from './server';
import { API_KEY_SECRET } from './settings';
import { Variants, VARIANT_SCHEME } from './variants';

let server: Server | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel('WarpForge');
  const variants = new Variants();
  // The server and the jobs refer to each other through these hooks (jobs need the server to send
  // requests; the server's client forwards notifications and lens/action commands to the jobs).
  let jobs: Jobs | undefined;
  const hooks: ServerHooks = {
    executeCommand: async (command, args, next) => {
      const j = jobs;
      if (!j) {
        return next(command, args);
      }
      const [a, b, c] = args as (string | undefined)[];
      switch (command) {
        case Cmd.optimize:
          if (typeof a === 'string' && typeof b === 'string') {
            const job = await j.optimize(a, b, c);
            return job ? { job: job.id, token: job.token } : undefined;
          }
          break;
        case Cmd.profile:
          if (typeof a === 'string' && typeof b === 'string') {
            const id = await j.profile(a, b);
            return id ? { job: id } : undefined;
          }
          break;
        case Cmd.showCandidate:
          if (typeof a === 'string' && typeof b === 'string') {
            return j.view(a, b);
          }
          break;
        case Cmd.cancel:
          if (typeof a === 'string') {
            return j.cancel(a);
          }
          break;
        case Cmd.accept:
          if (typeof a === 'string' && typeof b === 'string') {
            return j.accept(a, b);
          }
          break;
        case Cmd.reject:
          if (typeof a === 'string' && typeof b === 'string') {
            return j.reject(a, b);
          }
          break;
      }
      try {
        return await next(command, args);
      } catch (e) {
        void vscode.window.showErrorMessage(`WarpForge: ${errorText(e)}`);
        return undefined;
      }
    },
    workDoneProgress: (token, value) => jobs?.workDoneProgress(token, value) ?? false,
    candidate: (p) => jobs?.candidate(p),
    jobDone: (p) => jobs?.jobDone(p),
    stopped: () => jobs?.stopped(),
  };
  server = new Server(context, log, hooks);
  const gpuSupport = new GpuSupport(server, log);
  const gpu = new GpuStatusItem(server, log, gpuSupport);
  jobs = new Jobs(server, variants, log, (what, kernel) => gpu.allows(what, kernel));
  const search = new SearchView(context.extensionUri, server, jobs);
  const analysis = new AnalysisStatusItem(server);
  const s = server;
  const j = jobs;

  context.subscriptions.push(
    log,
    variants,
    s,
    gpu,
    analysis,
    j,
    search,
    vscode.workspace.registerTextDocumentContentProvider(VARIANT_SCHEME, variants),
    vscode.languages.registerCodeLensProvider({ scheme: VARIANT_SCHEME }, variants),

    vscode.commands.registerCommand('warpforge.optimizeKernel', async () => {
      if (!vscode.workspace.isTrusted) {
        return explainRestricted('Optimize Kernel');
      }
      const ref = await kernelAt(s, vscode.window.activeTextEditor);
      if (ref) {
        await j.optimize(ref.uri, ref.kernel);
      }
    }),

    vscode.commands.registerCommand('warpforge.profileKernel', async () => {
      if (!vscode.workspace.isTrusted) {
        return explainRestricted('Profile Kernel');
      }
      const ref = await kernelAt(s, vscode.window.activeTextEditor);
      if (ref) {
        await j.profile(ref.uri, ref.kernel);
      }
    }),

    vscode.commands.registerCommand('warpforge.addBenchmarkSpec', async () => {
      const ref = await kernelAt(s, vscode.window.activeTextEditor);
      if (!ref) {
        return;
      }
      try {
        const res = await s.command<{ applied: boolean }>(Cmd.addSpec, [ref.uri, ref.kernel]);
        if (!res.applied) {
          void vscode.window.showErrorMessage(`WarpForge: the spec for ${ref.kernel} was not applied (the file changed meanwhile?).`);
        }
      } catch (e) {
        void vscode.window.showErrorMessage(`WarpForge: cannot add a spec: ${errorText(e)}`);
      }
    }),

    vscode.commands.registerCommand('warpforge.showSearch', (jobId?: unknown) =>
      search.show(typeof jobId === 'string' ? jobId : undefined)),

    vscode.commands.registerCommand('warpforge.cancelJob', async (jobId?: unknown) => {
      if (typeof jobId === 'string') {
        return j.cancel(jobId);
      }
      const running = j.running();
      if (running.length === 0) {
        void vscode.window.showInformationMessage('WarpForge: no job is running.');
        return;
      }
      let target = running[0];
      if (running.length > 1) {
        const pick = await vscode.window.showQuickPick(
          running.map((r) => ({ label: r.kernel, description: `${r.id} · ${vscode.workspace.asRelativePath(vscode.Uri.parse(r.uri))}`, job: r })),
          { placeHolder: 'Cancel which job?' },
        );
        if (!pick) {
          return;
        }
        target = pick.job;
      }
      await j.cancel(target.id);
    }),

    vscode.commands.registerCommand('warpforge.viewVariant', async (...args: unknown[]) => {
      const ref = await j.resolveVariant(args);
      if (ref) {
        await j.view(ref.job, ref.candidate);
      }
    }),
    vscode.commands.registerCommand('warpforge.acceptVariant', async (...args: unknown[]) => {
      const ref = await j.resolveVariant(args);
      if (ref) {
        await j.accept(ref.job, ref.candidate);
      }
    }),
    vscode.commands.registerCommand('warpforge.rejectVariant', async (...args: unknown[]) => {
      const ref = await j.resolveVariant(args);
      if (ref) {
        await j.reject(ref.job, ref.candidate);
      }
    }),

    // Per-change review: one change (a lens in the diff, or the change under the cursor of the variant side),
    // or several picked from a list. The server applies them and refuses a set that breaks the kernel.
    vscode.commands.registerCommand('warpforge.acceptChange', async (...args: unknown[]) => {
      const [a, b, c] = args;
      if (typeof a === 'string' && typeof b === 'string' && typeof c === 'number') {
        const total = variants.hunksOf({ job: a, candidate: b }).length;
        await j.acceptHunks(a, b, [c], total);
        return;
      }
      const editor = vscode.window.activeTextEditor;
      const ref = Variants.parse(editor?.document.uri);
      const hunk = ref && editor ? variants.hunkAt(editor.document.uri, editor.selection.active.line) : undefined;
      if (ref && hunk) {
        await j.acceptHunks(ref.job, ref.candidate, [hunk.index], variants.hunksOf(ref).length);
      } else {
        await vscode.commands.executeCommand('warpforge.acceptChanges');
      }
    }),
    vscode.commands.registerCommand('warpforge.acceptChanges', async (...args: unknown[]) => {
      const ref = await j.resolveVariant(args);
      if (!ref) {
        return;
      }
      let items = variants.describe(ref);
      if (items.length === 0) {
        await j.view(ref.job, ref.candidate); // the changes come with the diff
        items = variants.describe(ref);
      }
      if (items.length === 0) {
        return;
      }
      const picked = await vscode.window.showQuickPick(
        items.map((i) => ({ label: i.label, detail: i.detail, index: i.hunk.index })),
        { canPickMany: true, title: 'WarpForge: accept which changes of the variant?', placeHolder: 'Pick the changes to apply (Space), then Enter' },
      );
      if (picked && picked.length) {
        await j.acceptHunks(ref.job, ref.candidate, picked.map((p) => p.index), items.length);
      }
    }),
    vscode.commands.registerCommand('warpforge.nextVariant', async (...args: unknown[]) => {
      const ref = await j.resolveVariant(args);
      const next = ref ? j.nextOf(ref) : undefined;
      if (ref && next) {
        // open the next one first: it takes the place of this one in the same group
        await j.view(next.job, next.candidate);
        await variants.close((r) => r.job === ref.job && r.candidate === ref.candidate);
      }
    }),

    vscode.commands.registerCommand('warpforge.setApiKey', async () => {
      const had = (await context.secrets.get(API_KEY_SECRET)) !== undefined;
      const key = await vscode.window.showInputBox({
        title: 'WarpForge: Anthropic API key',
        prompt: `Lets WarpForge ask Claude for variants (its own transformation library is always used). Stored in VS Code's secret storage, never in settings.${had ? ' Leave empty to remove the stored key.' : ''}`,
        placeHolder: 'sk-ant-…',
        password: true,
        ignoreFocusOut: true,
        validateInput: (v) => (/\s/.test(v.trim()) ? 'An API key has no spaces' : undefined),
      });
      if (key === undefined) {
        return; // dismissed
      }
      if (key.trim() === '') {
        if (had) {
          await context.secrets.delete(API_KEY_SECRET);
          void vscode.window.showInformationMessage('WarpForge: API key removed; variants come from the transformation library only.');
        }
        return;
      }
      await context.secrets.store(API_KEY_SECRET, key.trim());
      void vscode.window.showInformationMessage('WarpForge: API key stored in the secret storage and sent to the server.');
    }),
    context.secrets.onDidChange(async (e) => {
      if (e.key === API_KEY_SECRET) {
        await s.pushSettings();
        log.appendLine('[client] API key changed: settings sent to the server');
      }
    }),

    vscode.commands.registerCommand('warpforge.restartServer', () =>
      vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: 'WarpForge: restarting the server' },
        async () => {
          if (await s.restart()) {
            void vscode.window.showInformationMessage('WarpForge: server restarted.');
          }
        },
      )),

    vscode.commands.registerCommand('warpforge.showOutput', () => log.show()),

    vscode.commands.registerCommand('warpforge.showGpuStatus', () => gpu.show()),

    vscode.commands.registerCommand('warpforge.installGpuSupport', () => gpuSupport.install()),

    // Accept/Reject keys (Ctrl+Shift+Enter / Ctrl+Shift+Backspace) apply while a WarpForge diff is the active
    // tab, whichever of its two sides has the focus.
    vscode.window.tabGroups.onDidChangeTabs(() => setVariantContext()),
    vscode.window.tabGroups.onDidChangeTabGroups(() => setVariantContext()),

    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration('warpforge')) {
        return;
      }
      if (e.affectsConfiguration('warpforge.pythonPath') || e.affectsConfiguration('warpforge.importStrategy')) {
        log.appendLine('[client] warpforge.pythonPath or warpforge.importStrategy changed: restarting the server');
        await s.restart();
      } else if (!e.affectsConfiguration('warpforge.trace')) {
        await s.pushSettings();
        // the backend, Ray address and nvcc decide what GPU work can run
        await gpu.refresh();
      }
    }),

    // Trusting the workspace makes its interpreter/backend settings effective (they are restricted).
    vscode.workspace.onDidGrantWorkspaceTrust(async () => {
      log.appendLine('[client] workspace trusted: restarting the server with the workspace settings');
      await s.restart();
    }),
  );

  if (!vscode.workspace.isTrusted) {
    log.appendLine('[client] Restricted Mode: static hints only; Optimize Kernel is off until the workspace is trusted');
  }
  void s.start();
  // the Python extension's selection is the default interpreter: follow it unless warpforge.pythonPath is set
  void onPythonInterpreterChange(() => {
    if (!vscode.workspace.getConfiguration('warpforge').get<string>('pythonPath', '').trim()) {
      log.appendLine('[client] the Python extension selected another interpreter: restarting the server');
      void s.restart();
    }
  }).then((d) => d && context.subscriptions.push(d));
}

function setVariantContext(): void {
  void vscode.commands.executeCommand('setContext', 'warpforge.variantDiffActive', Variants.active() !== undefined);
}

export async function deactivate(): Promise<void> {
  await server?.stop();
  server = undefined;
}

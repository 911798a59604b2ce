// What GPU work the server can run (warpforge/gpuStatus): a status bar item that always says it, and the
// check Optimize and Profile make before they start anything. Without it, an Optimize on a machine without
// a GPU ran for seconds and ended as an information message about an evaluator error.
import * as vscode from 'vscode';
import { GpuSupport } from './gpuSupport';
import { GpuStatus, GpuStatusRequest } from './protocol';
import { errorText, Server } from './server';

const REMOTE_SSH_DOCS = 'https://code.visualstudio.com/docs/remote/ssh';

export class GpuStatusItem implements vscode.Disposable {
  private status: GpuStatus | undefined;
  private readonly item: vscode.StatusBarItem;
  private readonly subscription: vscode.Disposable;

  constructor(
    private readonly server: Server,
    private readonly log: vscode.OutputChannel,
    private readonly installer?: GpuSupport,
  ) {
    this.item = vscode.window.createStatusBarItem('warpforge.gpu', vscode.StatusBarAlignment.Left, 49);
    this.item.name = 'WarpForge GPU';
    this.item.command = 'warpforge.showGpuStatus';
    this.subscription = server.onDidChangeState(() => {
      this.status = undefined;
      if (server.running) {
        void this.refresh();
      } else {
        this.item.hide();
      }
    });
  }

  /** Ask the server again (at start, and after the settings it depends on changed). */
  async refresh(): Promise<GpuStatus | undefined> {
    if (!this.server.running) {
      return undefined;
    }
    try {
      const s = await this.server.request<GpuStatus>(GpuStatusRequest, null);
      this.status = s;
      this.render(s);
      this.log.appendLine(`[client] GPU status: ${s.summary}`);
      return s;
    } catch (e) {
      this.log.appendLine(`[client] GPU status unavailable: ${errorText(e)}`);
      return undefined;
    }
  }

  private render(s: GpuStatus): void {
    const tip = new vscode.MarkdownString(undefined, true);
    tip.appendMarkdown(`**WarpForge** — ${escape(s.summary)}\n\n`);
    if (!s.can_optimize) {
      tip.appendMarkdown(`Optimize and Profile are off: ${escape(s.reason)}. Hints keep working.\n\n`);
      tip.appendMarkdown(`To measure on a GPU: ${escape(s.advice)}.\n\n`);
    } else if (!s.can_profile) {
      tip.appendMarkdown('Profile needs a GPU on this machine; Optimize measures where the summary says.\n\n');
    }
    tip.appendMarkdown('| tool | found |\n|---|---|\n');
    for (const [tool, where] of Object.entries(s.tools)) {
      tip.appendMarkdown(`| ${tool.replace(/_/g, '-')} | ${escape(where)} |\n`);
    }
    this.item.tooltip = tip;
    if (s.can_optimize) {
      this.item.text = `$(circuit-board) ${s.gpus.length ? shortName(s.gpus[0]) + (s.gpus.length > 1 ? ` ×${s.gpus.length}` : '') : s.backend === 'ray' ? 'Ray cluster' : 'plug-in evaluator'}`;
      this.item.backgroundColor = undefined;
    } else {
      // Neutral: a machine without a GPU is a normal place to read hints; Optimize and Profile say what is
      // missing when they are asked for (allows), not a warning colour all day.
      this.item.text = '$(circuit-board) WarpForge: hints only (no GPU)';
      this.item.backgroundColor = undefined;
    }
    this.item.show();
  }

  /** True when `what` may start; otherwise a warning that says why and what to do, and false. */
  async allows(what: 'optimize' | 'profile', kernel: string): Promise<boolean> {
    const s = this.status ?? (await this.refresh());
    if (!s) {
      return true; // the server did not answer: the command itself reports what is wrong
    }
    if (what === 'optimize' ? s.can_optimize : s.can_profile) {
      return true;
    }
    const verb = what === 'optimize' ? 'Optimizing' : 'Profiling';
    // a GPU and no pycuda: the one thing missing is installable here (first GPU use)
    if (this.installer && s.gpus.length > 0 && s.tools.pycuda === 'not installed') {
      if (await this.installer.offer(`${verb} ${kernel}`, shortName(s.gpus[0]))) {
        const now = await this.refresh();
        return now !== undefined && (what === 'optimize' ? now.can_optimize : now.can_profile);
      }
      return false;
    }
    const advice = s.can_optimize ? 'open the folder on the GPU machine through VS Code Remote-SSH' : s.advice;
    void this.explain(
      `WarpForge: ${verb} ${kernel} needs an NVIDIA GPU on this machine, and there is none to use: ${s.reason}. ` +
        `Nothing was started; hints keep working. To measure on a GPU, ${advice}.`,
    );
    return false;
  }

  private async explain(message: string): Promise<void> {
    const choice = await vscode.window.showWarningMessage(message, 'Remote-SSH Guide', 'Set Ray Address', 'GPU Details');
    if (choice === 'Remote-SSH Guide') {
      await vscode.env.openExternal(vscode.Uri.parse(REMOTE_SSH_DOCS));
    } else if (choice === 'Set Ray Address') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'warpforge.rayAddress');
    } else if (choice === 'GPU Details') {
      await this.show();
    }
  }

  /** The status as a message (the status bar item's command). */
  async show(): Promise<void> {
    const s = await this.refresh();
    if (!s) {
      void vscode.window.showErrorMessage('WarpForge: the server did not say what GPU work it can run; see the WarpForge output.');
      return;
    }
    const tools = Object.entries(s.tools).map(([t, w]) => `${t.replace(/_/g, '-')}: ${w}`).join('; ');
    if (s.can_optimize) {
      void vscode.window.showInformationMessage(`WarpForge measures variants on ${s.summary}${s.driver ? ` (driver ${s.driver})` : ''}. ${tools}.`);
    } else {
      await this.explain(`WarpForge: no GPU to measure on: ${s.reason}. Hints keep working. To measure on a GPU, ${s.advice}. ${tools}.`);
    }
  }

  dispose(): void {
    this.subscription.dispose();
    this.item.dispose();
  }
}

/** "NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3": the vendor is the same for every GPU WarpForge uses. */
function shortName(name: string): string {
  return name.replace(/^NVIDIA\s+/, '');
}

function escape(text: string): string {
  return text.replace(/[\\`*_{}[\]()#+\-.!|<>]/g, (c) => `\\${c}`);
}

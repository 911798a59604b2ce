// The search view: a webview with the job's result (kept until the user acts: the variant waiting, with its
// evidence and Review / Accept / Reject / Next buttons, or what happened to it), the tree of tried variants
// (family, status, reason, speedup) and the best speedup over evaluations, refreshed every second while the
// job runs and whenever the job's state changes (a variant accepted or rejected elsewhere).
import * as crypto from 'node:crypto';
import * as vscode from 'vscode';
import { Job, Jobs } from './jobs';
import { SearchTree, SearchTreeRequest } from './protocol';
import { Server, errorText } from './server';

type FromWebview =
  | { type: 'ready' }
  | { type: 'open'; job: string; node: number }
  | { type: 'refresh' }
  | { type: 'review' | 'accept' | 'reject' | 'next'; job: string; candidate: string };

export class SearchView implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private jobId: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private inFlight = false;
  private readonly subs: vscode.Disposable[] = [];

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly server: Server,
    private readonly jobs: Jobs,
  ) {
    this.subs.push(
      jobs.onDidChange((job) => {
        if (!this.panel) {
          return;
        }
        if (job === undefined && this.jobId && !jobs.jobs.has(this.jobId)) {
          void this.panel.webview.postMessage({ type: 'gone', message: 'The server restarted; this job is gone.' });
          this.stopPolling();
        } else if (job && job.id === this.jobId) {
          void this.refresh();
          this.schedule(job);
        }
      }),
    );
  }

  /** Show the search of `jobId`, else of the running job, else of the active file's newest job, else the user
   *  picks among the jobs. */
  async show(jobId?: string): Promise<void> {
    let job = jobId ? this.jobs.jobs.get(jobId) : undefined;
    if (!job) {
      const all = this.jobs.all();
      if (all.length === 0) {
        void vscode.window.showInformationMessage('WarpForge: no optimize job yet; right-click a kernel → Optimize Kernel.');
        return;
      }
      const running = all.filter((j) => j.state === 'running');
      // the file in front: its newest job (all() is newest first)
      const here = vscode.window.activeTextEditor?.document.uri.toString();
      const mine = all.filter((j) => vscode.Uri.parse(j.uri).toString() === here);
      if (all.length === 1 || running.length === 1) {
        job = running[0] ?? all[0];
      } else if (running.length === 0 && mine.length > 0) {
        job = mine[0];
      } else {
        const pick = await vscode.window.showQuickPick(
          all.map((j) => ({
            label: `${j.kernel} (${j.id})`,
            description: `${j.state}${j.best ? ` · best ${j.best.speedup.toFixed(2)}×` : ''}`,
            job: j,
          })),
          { placeHolder: 'Show the search of which job?' },
        );
        job = pick?.job;
      }
      if (!job) {
        return;
      }
    }
    this.jobId = job.id;
    const title = `WarpForge search: ${job.kernel}`;
    if (this.panel) {
      this.panel.title = title;
      this.panel.reveal(undefined, true);
    } else {
      this.panel = vscode.window.createWebviewPanel('warpforge.search', title,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
          enableScripts: true,
          localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, 'extension', 'media')],
        });
      this.panel.webview.html = this.html(this.panel.webview);
      this.panel.onDidDispose(() => {
        this.panel = undefined;
        this.stopPolling();
      });
      this.panel.onDidChangeViewState(() => {
        if (this.panel?.visible) {
          void this.refresh();
        }
      });
      this.panel.webview.onDidReceiveMessage((m: FromWebview) => this.onMessage(m));
    }
    await this.refresh();
    this.schedule(job);
  }

  private schedule(job: Job): void {
    if (job.state === 'running' && !this.timer) {
      this.timer = setInterval(() => void this.refresh(), 1000);
    } else if (job.state !== 'running') {
      this.stopPolling();
    }
  }

  private stopPolling(): void {
    if (this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  private async refresh(): Promise<void> {
    const panel = this.panel;
    const jobId = this.jobId;
    if (!panel || !jobId || this.inFlight || !this.server.running) {
      return;
    }
    this.inFlight = true;
    try {
      const tree = await this.server.request<SearchTree>(SearchTreeRequest, { job: jobId });
      const job = this.jobs.jobs.get(jobId);
      await panel.webview.postMessage({
        type: 'tree',
        tree,
        best: job?.best ? { candidate: job.best.candidate, speedup: job.best.speedup, gpu: job.best.gpu } : null,
        result: job ? this.jobs.result(job) : null,
      });
      if (tree.state !== 'running') {
        this.stopPolling();
      }
    } catch (e) {
      await panel.webview.postMessage({ type: 'error', message: errorText(e) });
      this.stopPolling();
    } finally {
      this.inFlight = false;
    }
  }

  private onMessage(m: FromWebview): void {
    if (m.type === 'ready' || m.type === 'refresh') {
      void this.refresh();
    } else if (m.type === 'open' && typeof m.node === 'number' && typeof m.job === 'string') {
      void this.jobs.view(m.job, String(m.node), true);
    } else if (typeof m.job === 'string' && 'candidate' in m && typeof m.candidate === 'string') {
      const ref = { job: m.job, candidate: m.candidate };
      if (m.type === 'review') {
        void this.jobs.view(ref.job, ref.candidate, true);
      } else if (m.type === 'accept') {
        void this.jobs.accept(ref.job, ref.candidate);
      } else if (m.type === 'reject') {
        void this.jobs.reject(ref.job, ref.candidate);
      } else if (m.type === 'next') {
        void vscode.commands.executeCommand('warpforge.nextVariant', ref.job, ref.candidate);
      }
    }
  }

  private html(webview: vscode.Webview): string {
    const nonce = crypto.randomBytes(16).toString('base64');
    const media = vscode.Uri.joinPath(this.extensionUri, 'extension', 'media');
    const script = webview.asWebviewUri(vscode.Uri.joinPath(media, 'search.js'));
    const style = webview.asWebviewUri(vscode.Uri.joinPath(media, 'search.css'));
    const csp = [
      "default-src 'none'",
      `style-src ${webview.cspSource}`,
      `img-src ${webview.cspSource} data:`,
      `font-src ${webview.cspSource}`,
      `script-src 'nonce-${nonce}'`,
    ].join('; ');
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${style}">
<title>WarpForge search</title>
</head>
<body>
<header id="head"><h1 id="title">WarpForge search</h1><p id="summary" class="muted">Loading…</p></header>
<section id="result" aria-label="Result" role="status" aria-live="polite"></section>
<section aria-label="Best speedup over evaluations"><h2>Best verified speedup over evaluations</h2><div id="plot"></div></section>
<section aria-label="Search tree"><h2>Tree of tried variants <span class="muted small">(click a variant to open its diff)</span></h2><div id="tree"></div></section>
<script nonce="${nonce}" src="${script}"></script>
</body>
</html>`;
  }

  dispose(): void {
    this.stopPolling();
    this.panel?.dispose();
    for (const s of this.subs) {
      s.dispose();
    }
  }
}

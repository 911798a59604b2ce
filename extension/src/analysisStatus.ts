// "WarpForge starting / analysing" beside the language mode of a CUDA file (a language status item), so the
// seconds before the first hint are visibly WarpForge working rather than nothing happening. Driven by the
// client's state (starting) and the server's warpforge/analysis notifications (source phase, compiler phase,
// done); neutral (not busy, no severity) once the hints of every open document are published.
import * as vscode from 'vscode';
import { AnalysisParams } from './protocol';
import { DOCUMENT_SELECTOR, Server } from './server';

const PHASE_TEXT: Record<string, string> = {
  source: 'reading the kernels',
  compiler: 'compiling for the compiler and SASS hints',
};

export class AnalysisStatusItem implements vscode.Disposable {
  private readonly item: vscode.LanguageStatusItem;
  /** document uri -> the phase its analysis is in (absent: done) */
  private readonly busy = new Map<string, string>();
  private readonly subscriptions: vscode.Disposable[];
  private everReady = false;

  constructor(private readonly server: Server) {
    this.item = vscode.languages.createLanguageStatusItem('warpforge.analysis', DOCUMENT_SELECTOR);
    this.item.name = 'WarpForge analysis';
    this.subscriptions = [
      server.onDidChangeState(() => {
        if (!server.running) {
          this.busy.clear();
        }
        this.render();
      }),
      server.onAnalysis((p) => this.update(p)),
      vscode.window.onDidChangeActiveTextEditor(() => this.render()),
    ];
    this.render();
  }

  private update(p: AnalysisParams): void {
    if (p.phase === 'done') {
      this.busy.delete(p.uri);
      this.everReady = true;
    } else {
      this.busy.set(p.uri, p.phase);
    }
    this.render();
  }

  private render(): void {
    const item = this.item;
    item.command = undefined;
    item.severity = vscode.LanguageStatusSeverity.Information;
    if (!this.server.running) {
      if (this.server.problem && !this.server.isStarting) {
        item.busy = false;
        item.text = 'WarpForge: not running';
        item.detail = this.server.problem;
        item.severity = vscode.LanguageStatusSeverity.Error;
        item.command = { title: 'Show Output', command: 'warpforge.showOutput' };
      } else {
        item.busy = true;
        item.text = 'WarpForge starting';
        item.detail = 'hints appear when the server is up';
      }
      return;
    }
    const active = vscode.window.activeTextEditor?.document.uri.toString();
    const phase = (active !== undefined ? this.busy.get(active) : undefined) ?? this.busy.values().next().value;
    if (phase !== undefined) {
      item.busy = true;
      item.text = 'WarpForge analysing';
      item.detail = PHASE_TEXT[phase] ?? phase;
      return;
    }
    item.busy = false;
    item.text = 'WarpForge';
    item.detail = this.everReady ? 'hints up to date' : 'ready';
  }

  dispose(): void {
    for (const s of this.subscriptions) {
      s.dispose();
    }
    this.item.dispose();
  }
}

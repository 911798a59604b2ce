// Variants as read-only virtual documents (scheme warpforge-variant) and the diff editor that shows them.
import * as vscode from 'vscode';
import { CandidateTexts } from './protocol';

export const VARIANT_SCHEME = 'warpforge-variant';

export interface VariantRef {
  job: string;
  candidate: string;
}

export class Variants implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly texts = new Map<string, string>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  provideTextDocumentContent(uri: vscode.Uri): string {
    return (
      this.texts.get(uri.toString()) ??
      '// WarpForge: this variant is no longer available (the server restarted). Run Optimize Kernel again.\n'
    );
  }

  static uri(file: vscode.Uri, ref: VariantRef, side: 'variant' | 'original'): vscode.Uri {
    const query = new URLSearchParams({ job: ref.job, candidate: ref.candidate, side }).toString();
    return vscode.Uri.from({ scheme: VARIANT_SCHEME, path: file.path, query });
  }

  static parse(uri: vscode.Uri | undefined): VariantRef | undefined {
    if (!uri || uri.scheme !== VARIANT_SCHEME) {
      return undefined;
    }
    const q = new URLSearchParams(uri.query);
    const job = q.get('job');
    const candidate = q.get('candidate');
    return job && candidate ? { job, candidate } : undefined;
  }

  /** The variant shown in the active diff editor, if any. */
  static active(): VariantRef | undefined {
    const input = vscode.window.tabGroups.activeTabGroup.activeTab?.input;
    if (input instanceof vscode.TabInputTextDiff) {
      return Variants.parse(input.modified);
    }
    return undefined;
  }

  /** Open a diff: the current document (or the job's snapshot, when the document has changed since)
   *  on the left, the variant on the right. */
  async open(t: CandidateTexts, title: string, keepActiveGroup = true): Promise<void> {
    const file = vscode.Uri.parse(t.uri);
    const ref = { job: t.job, candidate: t.candidate };
    const right = Variants.uri(file, ref, 'variant');
    this.texts.set(right.toString(), t.variant);
    this.changed.fire(right);
    let left: vscode.Uri = file;
    try {
      const doc = await vscode.workspace.openTextDocument(file);
      if (doc.getText() !== t.original) {
        left = Variants.uri(file, ref, 'original');
        this.texts.set(left.toString(), t.original);
        this.changed.fire(left);
        title += ' (vs. the text the job started from)';
      }
    } catch {
      left = Variants.uri(file, ref, 'original');
      this.texts.set(left.toString(), t.original);
    }
    // From the search view: open next to the file's editor (or in the first column), not over the view.
    const column = keepActiveGroup
      ? undefined
      : vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === file.toString())?.viewColumn ??
        vscode.ViewColumn.One;
    await vscode.commands.executeCommand('vscode.diff', left, right, title, { preview: false, viewColumn: column });
  }

  /** Close the diff editors showing variants that match. */
  async close(match: (ref: VariantRef) => boolean): Promise<void> {
    const tabs: vscode.Tab[] = [];
    for (const group of vscode.window.tabGroups.all) {
      for (const tab of group.tabs) {
        const input = tab.input;
        const ref = input instanceof vscode.TabInputTextDiff ? Variants.parse(input.modified) : undefined;
        if (ref && match(ref)) {
          tabs.push(tab);
        }
      }
    }
    if (tabs.length) {
      await vscode.window.tabGroups.close(tabs);
    }
  }

  /** Forget texts of jobs that no longer exist (the server restarted). */
  clear(): void {
    const uris = [...this.texts.keys()];
    this.texts.clear();
    for (const u of uris) {
      this.changed.fire(vscode.Uri.parse(u));
    }
  }

  dispose(): void {
    this.changed.dispose();
  }
}

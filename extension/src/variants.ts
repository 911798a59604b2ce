// Variants as read-only virtual documents (scheme warpforge-variant) and the diff editor that shows them, with
// the diff's changes (hunks, from the server) for per-change accept: a lens above each change of the variant
// side (where the diff editor shows lenses: setting diffEditor.codeLens) and the change under the cursor.
import * as vscode from 'vscode';
import { CandidateTexts, DiffHunk } from './protocol';

export const VARIANT_SCHEME = 'warpforge-variant';

export interface VariantRef {
  job: string;
  candidate: string;
}

export class Variants implements vscode.TextDocumentContentProvider, vscode.CodeLensProvider, vscode.Disposable {
  private readonly texts = new Map<string, string>();
  /** variant URI -> the changes from the text the job started from */
  private readonly hunks = new Map<string, DiffHunk[]>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;
  private readonly lensesChanged = new vscode.EventEmitter<void>();
  readonly onDidChangeCodeLenses = this.lensesChanged.event;

  /** The changes of the variant `ref` (empty when its diff was never opened here). */
  hunksOf(ref: VariantRef): DiffHunk[] {
    for (const [uri, hs] of this.hunks) {
      const r = Variants.parse(vscode.Uri.parse(uri));
      if (r && r.job === ref.job && r.candidate === ref.candidate) {
        return hs;
      }
    }
    return [];
  }

  /** Each change of the variant `ref` in words, for a pick list: where it lands and its first changed line. */
  describe(ref: VariantRef): { hunk: DiffHunk; label: string; detail: string }[] {
    for (const [uri, hs] of this.hunks) {
      const r = Variants.parse(vscode.Uri.parse(uri));
      if (!r || r.job !== ref.job || r.candidate !== ref.candidate) {
        continue;
      }
      const lines = (this.texts.get(uri) ?? '').split('\n');
      return hs.map((h) => {
        const added = h.new_end - h.new_start;
        const removed = h.old_end - h.old_start;
        const where = added > 0 ? `variant lines ${h.new_start + 1}–${h.new_end}` : `removes lines ${h.old_start + 1}–${h.old_end}`;
        const first = lines.slice(h.new_start, h.new_end).find((l) => l.trim()) ?? '';
        return {
          hunk: h,
          label: `Change ${h.index + 1} of ${hs.length}: ${where}`,
          detail: `${first.trim().slice(0, 100)}${added || removed ? `  (+${added} −${removed})` : ''}`,
        };
      });
    }
    return [];
  }

  /** The change of the variant document `uri` at `line` (0-based, variant side), if any. */
  hunkAt(uri: vscode.Uri, line: number): DiffHunk | undefined {
    const hs = this.hunks.get(uri.toString()) ?? [];
    return hs.find((h) => line >= h.new_start && line < Math.max(h.new_end, h.new_start + 1));
  }

  provideCodeLenses(document: vscode.TextDocument): vscode.CodeLens[] {
    const ref = Variants.parse(document.uri);
    const hs = this.hunks.get(document.uri.toString());
    if (!ref || !hs || hs.length < 2) {
      return []; // one change: Accept Variant is the same thing
    }
    return hs.map((h) => {
      const line = Math.min(h.new_start, Math.max(0, document.lineCount - 1));
      return new vscode.CodeLens(new vscode.Range(line, 0, line, 0), {
        title: `Accept this change (${h.index + 1} of ${hs.length})`,
        command: 'warpforge.acceptChange',
        arguments: [ref.job, ref.candidate, h.index],
      });
    });
  }

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
    this.hunks.set(right.toString(), t.hunks ?? []);
    this.changed.fire(right);
    this.lensesChanged.fire();
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
    this.hunks.clear();
    for (const u of uris) {
      this.changed.fire(vscode.Uri.parse(u));
    }
  }

  dispose(): void {
    this.changed.dispose();
    this.lensesChanged.dispose();
  }
}

// Which kernel the user means: the server knows (tree-sitter), so ask it instead of guessing with regexes.
import * as vscode from 'vscode';
import { CodeAction, CodeActionRequest, CodeLensRequest, Command } from 'vscode-languageclient/node';
import { Cmd } from './protocol';
import { Server } from './server';

export interface KernelRef {
  /** the document's URI as the server knows it */
  uri: string;
  kernel: string;
  document: vscode.TextDocument;
}

function commandOf(item: Command | CodeAction): Command | undefined {
  if (typeof (item as Command).command === 'string') {
    return item as Command;
  }
  const cmd = (item as CodeAction).command;
  return cmd && typeof cmd === 'object' ? cmd : undefined;
}

/** The kernel containing the cursor (from the server's code actions there); else the file's only kernel;
 *  else the user picks one of the file's kernels (from the server's code lenses). */
export async function kernelAt(server: Server, editor: vscode.TextEditor | undefined): Promise<KernelRef | undefined> {
  if (!editor) {
    void vscode.window.showWarningMessage('WarpForge: open a .cu file and put the cursor inside a __global__ kernel.');
    return undefined;
  }
  const client = await server.ready();
  if (!client) {
    return undefined;
  }
  const document = editor.document;
  const uri = client.code2ProtocolConverter.asUri(document.uri);
  const pos = editor.selection.active;
  const actions = (await client.sendRequest(CodeActionRequest.type, {
    textDocument: { uri },
    range: { start: { line: pos.line, character: pos.character }, end: { line: pos.line, character: pos.character } },
    context: { diagnostics: [], only: ['refactor'] },
  })) ?? [];
  for (const a of actions) {
    const cmd = commandOf(a);
    if (cmd?.command === Cmd.optimize && typeof cmd.arguments?.[1] === 'string') {
      return { uri, kernel: cmd.arguments[1], document };
    }
  }
  // Not inside a kernel: offer the file's kernels (every kernel has an "Add/Edit benchmark spec" lens naming it).
  const lenses = (await client.sendRequest(CodeLensRequest.type, { textDocument: { uri } })) ?? [];
  const names: { kernel: string; line: number }[] = [];
  for (const l of lenses) {
    if (l.command?.command === Cmd.addSpec && typeof l.command.arguments?.[1] === 'string') {
      names.push({ kernel: l.command.arguments[1], line: l.range.start.line });
    }
  }
  if (names.length === 0) {
    void vscode.window.showWarningMessage(`WarpForge: no __global__ kernel in ${vscode.workspace.asRelativePath(document.uri)}.`);
    return undefined;
  }
  if (names.length === 1) {
    return { uri, kernel: names[0].kernel, document };
  }
  const pick = await vscode.window.showQuickPick(
    names.map((n) => ({ label: n.kernel, description: `line ${n.line + 1}` })),
    { placeHolder: 'The cursor is not inside a kernel: which kernel?' },
  );
  return pick ? { uri, kernel: pick.label, document } : undefined;
}

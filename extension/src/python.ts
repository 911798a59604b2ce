// Which Python runs the server, and whether it can import warpforge.
import { execFile } from 'node:child_process';
import * as vscode from 'vscode';
import { probeArgs } from './launch';
import { expand } from './settings';

export interface Interpreter {
  path: string;
  /** where the choice came from, for messages */
  source: 'setting warpforge.pythonPath' | 'the Python extension' | 'default';
}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { id: string; path: string } | undefined;
    resolveEnvironment(env: { id: string; path: string } | string): Promise<
      { executable?: { uri?: vscode.Uri } } | undefined
    >;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
}

/** Calls `listener` when the Python extension's selected interpreter changes (the server then restarts with
 *  it, as the template's extensions do); nothing when that extension is absent. */
export async function onPythonInterpreterChange(listener: () => void): Promise<vscode.Disposable | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  if (!ext) {
    return undefined;
  }
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    return api?.environments?.onDidChangeActiveEnvironmentPath?.(() => listener());
  } catch {
    return undefined;
  }
}

export async function resolveInterpreter(log: vscode.OutputChannel): Promise<Interpreter> {
  const configured = expand(vscode.workspace.getConfiguration('warpforge').get<string>('pythonPath', '').trim());
  if (configured) {
    return { path: configured, source: 'setting warpforge.pythonPath' };
  }
  const fromExtension = await pythonExtensionInterpreter(log);
  if (fromExtension) {
    return { path: fromExtension, source: 'the Python extension' };
  }
  return { path: process.platform === 'win32' ? 'python' : 'python3', source: 'default' };
}

async function pythonExtensionInterpreter(log: vscode.OutputChannel): Promise<string | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  if (!ext) {
    return undefined;
  }
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    const envs = api?.environments;
    if (!envs) {
      return undefined;
    }
    const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
    const active = envs.getActiveEnvironmentPath(resource);
    if (!active) {
      return undefined;
    }
    const resolved = await envs.resolveEnvironment(active);
    return resolved?.executable?.uri?.fsPath ?? active.path;
  } catch (e) {
    log.appendLine(`[client] could not ask the Python extension for its interpreter: ${String(e)}`);
    return undefined;
  }
}

export interface ImportCheck {
  ok: boolean;
  version?: string;
  /** why not, in words */
  problem?: string;
}

/** Run `python -P -c "import warpforge"` the way the server runs (same flags, environment and neutral
 *  working directory: a probe from the workspace would import its modules too); resolves with the version
 *  or the reason it failed. */
export function checkWarpforge(python: string, env: NodeJS.ProcessEnv, cwd: string, bundled = false): Promise<ImportCheck> {
  // An interpreter's own install may lack any dependency: import what `python -m warpforge serve` imports
  // (the package, its command line, the language server). The bundle has them all by construction; what can
  // go wrong there is a compiled wheel that does not load (another platform or CPython), so it imports the
  // package and its compiled dependencies only: every restart pays for this probe, and the full import of
  // the server doubled it (tens of seconds on a busy machine).
  const modules = bundled ? 'warpforge, tree_sitter, tree_sitter_cuda' : 'warpforge, warpforge.cli, warpforge.lsp.server';
  return new Promise((resolve) => {
    execFile(
      python,
      probeArgs(`import sys, ${modules}; sys.stdout.write(warpforge.__version__)`),
      // the first start of a fresh install compiles the bundled libraries' byte code: slow on a busy machine
      { timeout: 120_000, env, cwd },
      (err, stdout, stderr) => {
        if (!err) {
          resolve({ ok: true, version: stdout.trim() });
          return;
        }
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') {
          resolve({ ok: false, problem: `the interpreter ${python} was not found` });
        } else if (/No module named '?warpforge'?(\s|$)/.test(stderr)) {
          resolve({ ok: false, problem: `${python} cannot import the warpforge package` });
        } else if (/No module named/.test(stderr)) {
          const missing = /No module named '?([\w.]+)'?/.exec(stderr)?.[1] ?? '?';
          resolve({
            ok: false,
            problem: missing.startsWith('warpforge.')
              ? `the warpforge installed for ${python} has no ${missing} (an older version?)`
              : `${python} finds warpforge but not its dependency ${missing}`,
          });
        } else {
          const last = stderr.trim().split('\n').pop() ?? err.message;
          resolve({ ok: false, problem: `${python} -c "import warpforge" failed: ${last}` });
        }
      },
    );
  });
}

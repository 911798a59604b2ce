// pycuda on first GPU use. It is the one dependency the .vsix cannot carry: it compiles against the user's
// CUDA. Optimize/Profile on a machine with a GPU and no pycuda offer to install it; so does the command
// "WarpForge: Install GPU Support (pycuda)". It goes into the extension's global storage (one folder per
// CPython version, already on the server's PYTHONPATH) by its exact pinned name==version, with pip's own
// log kept, and a failure says what failed, where the log is and what to do. The issue this answers: the
// extension once offered `pip install warpforge`, an unpublished name anyone could later claim.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { GPU_PACKAGES, PYCUDA_REQUIREMENT, versionText } from './bundle';
import { pythonEnv } from './launch';
import { Runtime, Server } from './server';

/** The arguments of the install (after the interpreter): pinned requirements into a target folder. numpy
 *  comes here too, at the bundle's lock pin: the .vsix does not carry it (only GPU work imports it, and one
 *  copy per CPython version made the .vsix 90 MB), so it is installed once, for the interpreter in use. */
export function pipInstallArgs(target: string): string[] {
  return ['-P', '-m', 'pip', 'install', '--target', target, '--upgrade', '--no-input', '--disable-pip-version-check',
    '--progress-bar', 'off', PYCUDA_REQUIREMENT, ...GPU_PACKAGES];
}

/** The line of pip's output that says best why it failed. */
export function pipFailure(output: string): string {
  const lines = output.split('\n').map((l) => l.trim()).filter(Boolean);
  return lines.find((l) => /fatal error:/.test(l))
    ?? lines.find((l) => /^ERROR:/.test(l))
    ?? lines.filter((l) => /error/i.test(l)).pop()
    ?? lines.pop()
    ?? 'pip printed nothing';
}

export class GpuSupport {
  private installing: Promise<boolean> | undefined;

  constructor(
    private readonly server: Server,
    private readonly log: vscode.OutputChannel,
  ) {}

  /** Before a GPU job on a machine with `gpu` and no pycuda: ask, then install. True when it is installed
   *  (and the server restarted with it). */
  async offer(what: string, gpu: string): Promise<boolean> {
    const runtime = this.server.runtime;
    if (!runtime) {
      return false;
    }
    const choice = await vscode.window.showInformationMessage(
      `WarpForge: ${what} runs kernels on the ${gpu} through pycuda, which is not installed for ${runtime.info.python}. ` +
        `Install ${PYCUDA_REQUIREMENT} into the extension's storage now? It compiles against your CUDA toolkit (a minute or two).`,
      'Install pycuda',
      'Not Now',
    );
    return choice === 'Install pycuda' ? this.install() : false;
  }

  /** Install the pinned pycuda for the server's interpreter (one install at a time). */
  install(): Promise<boolean> {
    if (!this.installing) {
      this.installing = this.doInstall().finally(() => {
        this.installing = undefined;
      });
    }
    return this.installing;
  }

  private async doInstall(): Promise<boolean> {
    const runtime = this.server.runtime ?? (await this.server.start(), this.server.runtime);
    if (!runtime) {
      void vscode.window.showErrorMessage(
        `WarpForge: cannot install ${PYCUDA_REQUIREMENT}: the server's interpreter is not usable (${this.server.problem ?? 'see the WarpForge output'}).`);
      return false;
    }
    fs.mkdirSync(runtime.gpuLibs, { recursive: true });
    const logFile = path.join(path.dirname(runtime.gpuLibs), `pip-install-${path.basename(runtime.gpuLibs)}.log`);
    const args = pipInstallArgs(runtime.gpuLibs);
    const shown = `${runtime.info.python} ${args.join(' ')}`;
    this.log.appendLine(`[client] installing ${PYCUDA_REQUIREMENT}: ${shown} (log: ${logFile})`);
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `WarpForge: installing ${PYCUDA_REQUIREMENT}`, cancellable: true },
      (progress, token) => this.run(runtime, args, logFile, progress, token),
    );
    if (result.ok) {
      this.log.appendLine(`[client] ${PYCUDA_REQUIREMENT} installed in ${runtime.gpuLibs}; restarting the server`);
      await this.server.restart();
      void vscode.window.showInformationMessage(`WarpForge: ${PYCUDA_REQUIREMENT} installed for Python ${versionText(runtime.info)}.`);
      return true;
    }
    if (result.cancelled) {
      this.log.appendLine(`[client] installing ${PYCUDA_REQUIREMENT} cancelled`);
      return false;
    }
    const reason = pipFailure(result.output);
    this.log.appendLine(`[client] installing ${PYCUDA_REQUIREMENT} failed: ${reason}`);
    const choice = await vscode.window.showErrorMessage(
      `WarpForge: installing ${PYCUDA_REQUIREMENT} for ${runtime.info.python} (Python ${versionText(runtime.info)}) failed: ${reason}. ` +
        `pip's log: ${logFile}. pycuda compiles against your CUDA toolkit: check that nvcc is on PATH (or CUDA_HOME is set), ` +
        `that a C++ compiler and Python's headers (python3-dev) are installed and that the package index can be reached, then try again. ` +
        `Hints keep working meanwhile.`,
      'Open pip Log',
      'Retry',
      'Copy Command',
    );
    if (choice === 'Open pip Log') {
      await vscode.window.showTextDocument(vscode.Uri.file(logFile));
    } else if (choice === 'Retry') {
      return this.install();
    } else if (choice === 'Copy Command') {
      await vscode.env.clipboard.writeText(shown);
    }
    return false;
  }

  /** pip with the bundled pip first on its path (the user's interpreter may have none: uv venvs, Debian's
   *  python3), its output to the log file and its steps to the progress notification. */
  private run(runtime: Runtime, args: string[], logFile: string,
    progress: vscode.Progress<{ message?: string }>, token: vscode.CancellationToken,
  ): Promise<{ ok: boolean; cancelled: boolean; output: string }> {
    const bundledPip = runtime.bundle ? [path.join(runtime.bundle.root, 'pip')] : [];
    const env = pythonEnv(process.env);
    delete env.PYTHONPATH;
    if (bundledPip.length) {
      env.PYTHONPATH = bundledPip.join(path.delimiter);
    }
    const out = fs.createWriteStream(logFile);
    out.write(`$ ${runtime.info.python} ${args.join(' ')}\n`);
    return new Promise((resolve) => {
      let output = '';
      let cancelled = false;
      const child = spawn(runtime.info.python, args, { env, cwd: path.dirname(runtime.gpuLibs) });
      const sub = token.onCancellationRequested(() => {
        cancelled = true;
        child.kill();
      });
      const take = (chunk: Buffer) => {
        const text = chunk.toString();
        output += text;
        out.write(text);
        for (const line of text.split('\n')) {
          const step = /^\s*(Collecting|Downloading|Building|Installing|Successfully)\b.*/.exec(line);
          if (step) {
            progress.report({ message: step[0].trim().slice(0, 100) });
          }
        }
      };
      child.stdout.on('data', take);
      child.stderr.on('data', take);
      child.on('error', (e) => {
        output += `\nERROR: ${e.message}`;
      });
      child.on('close', (code) => {
        sub.dispose();
        out.end(`\n[exit status ${code}]\n`);
        resolve({ ok: code === 0 && !cancelled, cancelled, output });
      });
    });
  }
}

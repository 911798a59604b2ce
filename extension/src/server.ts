// Starts, restarts and talks to `python -P -m warpforge serve` through vscode-languageclient. The process
// runs in a neutral directory (see launch.ts) and learns the workspace and its trust from initialize.
import * as path from 'node:path';
import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ProgressToken,
  ServerOptions,
  State,
  TransportKind,
  WorkDoneProgressBegin,
  WorkDoneProgressEnd,
  WorkDoneProgressReport,
} from 'vscode-languageclient/node';
import {
  AnalysisNotification, AnalysisParams, CandidateNotification, CandidateParams, JobDoneNotification, JobDoneParams,
} from './protocol';
import { neutralDir, serverLaunch } from './launch';
import {
  Bundle, bundlePaths, findBundle, gpuLibsDir, joinPythonPath, MIN_PYTHON, probePython, PYCUDA_REQUIREMENT,
  PythonInfo, unusable, versionText,
} from './bundle';
import { checkWarpforge, Interpreter, resolveInterpreter } from './python';
import { RedactingChannel } from './redact';
import { serverOptions } from './settings';

export type ProgressValue = WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd;

/** What the rest of the extension plugs into the client. */
export interface ServerHooks {
  /** Commands the server's code lenses and code actions carry (warpforge.optimize, ...) pass through
   *  here before reaching the server, so the editor can add its own UI (progress, diff, trust check). */
  executeCommand(command: string, args: unknown[], next: (command: string, args: unknown[]) => Promise<unknown>): Promise<unknown>;
  /** Work-done progress of WarpForge jobs; return true when handled (else the default window progress). */
  workDoneProgress(token: ProgressToken, value: ProgressValue): boolean;
  candidate(params: CandidateParams): void;
  jobDone(params: JobDoneParams): void;
  /** The server stopped (restart, crash): its jobs are gone. */
  stopped(): void;
}

export interface Runtime {
  info: PythonInfo;
  /** undefined when the interpreter's own warpforge runs (importStrategy fromEnvironment, development build) */
  bundle: Bundle | undefined;
  /** where pycuda is installed on first GPU use (on the server's PYTHONPATH) */
  gpuLibs: string;
  env: NodeJS.ProcessEnv;
}

export const DOCUMENT_SELECTOR = [
  { scheme: 'file', language: 'cuda-cpp' },
  { scheme: 'file', language: 'cuda' },
  { scheme: 'untitled', language: 'cuda-cpp' },
  { scheme: 'untitled', language: 'cuda' },
];

export class Server implements vscode.Disposable {
  client: LanguageClient | undefined;
  private starting: Promise<boolean> | undefined;
  private readonly stateEmitter = new vscode.EventEmitter<void>();
  readonly onDidChangeState = this.stateEmitter.event;
  private readonly analysisEmitter = new vscode.EventEmitter<AnalysisParams>();
  /** warpforge/analysis: a document's hints began a phase or are published (the language status item) */
  readonly onAnalysis = this.analysisEmitter.event;
  /** why the server is not running, when it is not */
  problem: string | undefined;
  /** the interpreter and libraries of the running server (the GPU installer uses the same) */
  runtime: Runtime | undefined;
  /** the output channel as the language client sees it: secrets masked (trace logs every message) */
  private readonly channel: RedactingChannel;
  /** headers and build descriptions on disk (one watcher for the extension's lifetime, across restarts) */
  private fileWatcher: vscode.FileSystemWatcher | undefined;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.OutputChannel,
    private readonly hooks: ServerHooks,
  ) {
    this.channel = new RedactingChannel(log);
  }

  /** true from the start of (re)starting until the server answers or gives up */
  get isStarting(): boolean {
    return this.starting !== undefined;
  }

  get running(): boolean {
    return this.client !== undefined && this.client.state === State.Running;
  }

  start(): Promise<boolean> {
    if (!this.starting) {
      this.starting = this.doStart().finally(() => {
        this.starting = undefined;
      });
    }
    return this.starting;
  }

  async restart(): Promise<boolean> {
    await this.stop();
    const ok = await this.start();
    if (ok) {
      this.log.appendLine('[client] server restarted');
    }
    return ok;
  }

  async stop(): Promise<void> {
    if (this.starting) {
      await this.starting.catch(() => undefined);
    }
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(5000);
      } catch (e) {
        this.log.appendLine(`[client] stopping the server: ${String(e)}`);
      }
      try {
        await client.dispose();
      } catch {
        // already disposed
      }
      this.hooks.stopped();
      this.stateEmitter.fire();
    }
  }

  private async doStart(): Promise<boolean> {
    const interpreter = await resolveInterpreter(this.log);
    const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
    const cwd = neutralDir(this.context.globalStorageUri?.fsPath, folders);
    const info = await probePython(interpreter.path, cwd);
    if ('problem' in info) {
      return this.cannotStart(info.problem, interpreter, 'interpreter');
    }
    const strategy = vscode.workspace.getConfiguration('warpforge').get<string>('importStrategy', 'useBundled');
    const bundle = strategy === 'fromEnvironment' ? undefined : findBundle(this.context.extensionPath);
    const bad = unusable(info, bundle);
    if (bad) {
      return this.cannotStart(bad, interpreter, 'interpreter');
    }
    const gpuLibs = gpuLibsDir(this.context.globalStorageUri.fsPath, info);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      // the bundled libraries first, then pycuda when it was installed on first GPU use, then the user's own
      PYTHONPATH: joinPythonPath([...(bundle ? bundlePaths(bundle, info) : []), gpuLibs], process.env.PYTHONPATH),
      // what the server's own advice quotes when pycuda is missing
      WARPFORGE_PYCUDA: PYCUDA_REQUIREMENT,
      ...(bundle ? { WARPFORGE_BUNDLE: bundle.root } : {}),
    };
    if (bundle) {
      // Byte code of the bundled libraries goes to the extension's storage: the extension folder may be
      // read-only, and without cached byte code every start compiles every module it imports again (the server
      // then took 14-24 s instead of 10 to import on a busy machine). PYTHONDONTWRITEBYTECODE, often set
      // so that source trees stay clean, has nothing to protect here: nothing is written next to sources.
      env.PYTHONPYCACHEPREFIX = path.join(this.context.globalStorageUri.fsPath, 'pycache');
      delete env.PYTHONDONTWRITEBYTECODE;
    }
    const launch = serverLaunch(interpreter.path, cwd, env);
    const check = await checkWarpforge(interpreter.path, launch.options.env, launch.options.cwd, bundle !== undefined);
    if (!check.ok) {
      const problem = bundle
        ? `the WarpForge server bundled in this extension does not start with ${interpreter.path} (Python ${versionText(info)}): ${check.problem}`
        : (check.problem ?? 'warpforge is not importable');
      return this.cannotStart(problem, interpreter, bundle ? 'bundle' : strategy === 'fromEnvironment' ? 'environment' : 'unbundled');
    }
    this.runtime = { info, bundle, gpuLibs, env: launch.options.env };
    this.problem = undefined;
    this.log.appendLine(
      `[client] starting the server: ${interpreter.path} ${launch.args.join(' ')} in ${launch.options.cwd} (warpforge ${check.version} ${bundle ? `bundled for ${bundle.target}` : 'from the interpreter\'s environment'}, Python ${versionText(info)} from ${interpreter.source}, workspace ${vscode.workspace.isTrusted ? 'trusted' : 'not trusted: nothing is compiled'})`,
    );
    const serverOpts: ServerOptions = {
      command: launch.command,
      args: launch.args,
      transport: TransportKind.stdio,
      options: launch.options,
    };
    const hooks = this.hooks;
    const init = await serverOptions(this.context.secrets);
    this.channel.addSecret(init.warpforge.apiKey);
    const clientOpts: LanguageClientOptions = {
      documentSelector: DOCUMENT_SELECTOR,
      // Headers (edited elsewhere, or .h files the client does not sync) and the project's build description:
      // a change refreshes the hints of the files that include the header, or of every file for the build.
      synchronize: { fileEvents: this.watcher() },
      outputChannel: this.channel,
      traceOutputChannel: this.channel,
      initializationOptions: init,
      middleware: {
        executeCommand: (command, args, next) =>
          hooks.executeCommand(command, args, async (c, a) => next(c, a)),
        handleWorkDoneProgress: (token, params, next) => {
          if (!hooks.workDoneProgress(token, params)) {
            next(token, params);
          } else if (params.kind === 'end') {
            next(token, params); // lets the client release its (silent) progress part
          }
        },
      },
    };
    const client = new LanguageClient('warpforge', 'WarpForge', serverOpts, clientOpts);
    client.onNotification(CandidateNotification, (p: CandidateParams) => hooks.candidate(p));
    client.onNotification(JobDoneNotification, (p: JobDoneParams) => hooks.jobDone(p));
    client.onNotification(AnalysisNotification, (p: AnalysisParams) => this.analysisEmitter.fire(p));
    client.onDidChangeState((e) => {
      if (e.newState === State.Stopped && this.client === client) {
        hooks.stopped();
      }
      this.stateEmitter.fire();
    });
    this.client = client;
    try {
      await client.start();
    } catch (e) {
      this.problem = `the server did not start: ${String(e)}`;
      this.log.appendLine(`[client] ${this.problem}`);
      void vscode.window.showErrorMessage(`WarpForge: ${this.problem}`, 'Show Output').then((c) => {
        if (c) {
          this.log.show();
        }
      });
      return false;
    }
    this.stateEmitter.fire();
    return true;
  }

  /** Why the server cannot start, logged and shown once, with what to do: choose another interpreter, or
   *  read the output. Never an install command for a package name: the server comes with the extension. */
  private cannotStart(problem: string, interpreter: Interpreter, kind: 'interpreter' | 'bundle' | 'environment' | 'unbundled'): false {
    this.problem = problem;
    this.runtime = undefined;
    this.log.appendLine(`[client] not starting the server: ${problem} (interpreter from ${interpreter.source})`);
    this.stateEmitter.fire();
    const todo = {
      interpreter: `Choose a Python ${MIN_PYTHON.join('.')} or newer: select it in the Python extension, or set warpforge.pythonPath; the server restarts by itself.`,
      bundle: 'The WarpForge output has the error; choosing another interpreter (warpforge.pythonPath) or reinstalling the extension restores a working server.',
      environment: 'warpforge.importStrategy is "fromEnvironment", so the interpreter must provide warpforge itself; set it to "useBundled" to run the copy that comes with the extension.',
      unbundled: 'This build of the extension carries no bundled server (a development build): run `npm run package` in the checkout and install the .vsix it makes.',
    }[kind];
    void this.explain(`WarpForge: ${problem}, so its hints and optimizations are off. ${todo}`);
    return false;
  }

  private async explain(message: string): Promise<void> {
    const pythonExt = vscode.extensions.getExtension('ms-python.python') !== undefined;
    const choice = await vscode.window.showErrorMessage(message, ...(pythonExt ? ['Select Interpreter'] : []), 'Open Settings', 'Show Output');
    if (choice === 'Select Interpreter') {
      await vscode.commands.executeCommand('python.setInterpreter');
    } else if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'warpforge.pythonPath');
    } else if (choice === 'Show Output') {
      this.log.show();
    }
  }

  /** The running client, starting the server when needed; undefined (with the reason shown) if it cannot run. */
  async ready(): Promise<LanguageClient | undefined> {
    if (!this.running) {
      if (this.client && this.client.state === State.Starting) {
        await new Promise<void>((resolve) => {
          const sub = this.onDidChangeState(() => {
            if (!this.client || this.client.state !== State.Starting) {
              sub.dispose();
              resolve();
            }
          });
        });
      } else {
        await this.start();
      }
    }
    if (!this.running || !this.client) {
      void vscode.window.showErrorMessage(
        `WarpForge: the language server is not running${this.problem ? ` (${this.problem})` : ''}. See the WarpForge output, then run "WarpForge: Restart Server".`,
      );
      return undefined;
    }
    return this.client;
  }

  /** workspace/executeCommand straight to the server (bypassing the middleware). */
  async command<T>(command: string, args: unknown[]): Promise<T> {
    const client = await this.ready();
    if (!client) {
      throw new Error('the WarpForge server is not running');
    }
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as T;
  }

  async request<T>(method: string, params: unknown): Promise<T> {
    const client = await this.ready();
    if (!client) {
      throw new Error('the WarpForge server is not running');
    }
    return (await client.sendRequest(method, params)) as T;
  }

  /** Push the settings (and the API key from the secret store) to the running server. */
  async pushSettings(): Promise<void> {
    if (!this.running || !this.client) {
      return;
    }
    const settings = await serverOptions(this.context.secrets);
    this.channel.addSecret(settings.warpforge.apiKey);
    await this.client.sendNotification(DidChangeConfigurationNotification.type, { settings });
  }

  /** The watcher whose events the client forwards (workspace/didChangeWatchedFiles): headers the kernels
   *  include, warpforge.toml and compile_commands.json. */
  private watcher(): vscode.FileSystemWatcher {
    this.fileWatcher ??= vscode.workspace.createFileSystemWatcher(
      '**/{*.h,*.hh,*.hpp,*.hxx,*.cuh,*.inl,*.inc,warpforge.toml,compile_commands.json}');
    return this.fileWatcher;
  }

  dispose(): void {
    void this.stop();
    this.fileWatcher?.dispose();
    this.stateEmitter.dispose();
  }
}

/** The message of a JSON-RPC error (or any error) for the user. */
export function errorText(e: unknown): string {
  if (e && typeof e === 'object' && 'message' in e) {
    return String((e as { message: unknown }).message);
  }
  return String(e);
}

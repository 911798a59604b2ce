// Starts, restarts and talks to `python -P -m warpforge serve` through vscode-languageclient. The process
// runs in a neutral directory (see launch.ts) and learns the workspace and its trust from initialize.
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
import { CandidateNotification, CandidateParams, JobDoneNotification, JobDoneParams } from './protocol';
import { neutralDir, serverLaunch } from './launch';
import { checkWarpforge, installCommand, resolveInterpreter } from './python';
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
  /** why the server is not running, when it is not */
  problem: string | undefined;
  /** the output channel as the language client sees it: secrets masked (trace logs every message) */
  private readonly channel: RedactingChannel;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.OutputChannel,
    private readonly hooks: ServerHooks,
  ) {
    this.channel = new RedactingChannel(log);
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
    const launch = serverLaunch(interpreter.path, neutralDir(this.context.globalStorageUri?.fsPath, folders), process.env);
    const check = await checkWarpforge(interpreter.path, launch.options.env, launch.options.cwd);
    if (!check.ok) {
      this.problem = check.problem;
      this.log.appendLine(`[client] not starting the server: ${check.problem} (interpreter from ${interpreter.source})`);
      this.stateEmitter.fire();
      void this.explainMissing(interpreter.path, check.problem ?? 'warpforge is not importable');
      return false;
    }
    this.problem = undefined;
    this.log.appendLine(
      `[client] starting the server: ${interpreter.path} ${launch.args.join(' ')} in ${launch.options.cwd} (warpforge ${check.version}, interpreter from ${interpreter.source}, workspace ${vscode.workspace.isTrusted ? 'trusted' : 'not trusted: nothing is compiled'})`,
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

  private async explainMissing(python: string, problem: string): Promise<void> {
    const cmd = installCommand(python);
    const choice = await vscode.window.showErrorMessage(
      `WarpForge: ${problem}, so its hints and optimizations are off. Install it with: ${cmd} — then run "WarpForge: Restart Server". Or choose another interpreter in the setting warpforge.pythonPath.`,
      'Install in Terminal',
      'Copy Command',
      'Open Settings',
    );
    if (choice === 'Install in Terminal') {
      const term = vscode.window.createTerminal('WarpForge: install');
      term.show();
      term.sendText(cmd);
    } else if (choice === 'Copy Command') {
      await vscode.env.clipboard.writeText(cmd);
    } else if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'warpforge.pythonPath');
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

  dispose(): void {
    void this.stop();
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

import * as vscode from 'vscode';

/** The settings object the server reads from initializationOptions and didChangeConfiguration. */
export interface ServerSettings {
  strategy: string;
  budget: number;
  timeBudget: number;
  model: string;
  nvccPath: string;
  arch: string;
  evaluationBackend: string;
  rayAddress: string;
  /** the workspace store's file or folder; '' keeps it in the user's cache, keyed by the workspace */
  storePath: string;
  /** search only variants that keep the kernel's launch contract (no host launch site changes) */
  keepLaunch: boolean;
  /** bytes; larger documents get a notice instead of analysis */
  maxDocumentSize: number;
  /** the workspace is trusted: false keeps the server from compiling or running anything (Restricted Mode) */
  trusted: boolean;
  /** code lenses above kernels (the server sends none when off) */
  codeLensEnabled: boolean;
  /** hint codes the server does not publish ("WF104", "WF2*") */
  hintsExclude: string[];
  /** the least severe hint the server publishes: error | warning | info | hint */
  hintsMinSeverity: string;
  apiKey?: string;
}

export const API_KEY_SECRET = 'warpforge.apiKey';

export function serverSettings(): ServerSettings {
  const c = vscode.workspace.getConfiguration('warpforge');
  return {
    strategy: c.get<string>('strategy', 'beam'),
    budget: c.get<number>('budget', 48),
    timeBudget: c.get<number>('timeBudget', 300),
    model: c.get<string>('model', ''),
    nvccPath: expand(c.get<string>('nvccPath', '')),
    arch: c.get<string>('arch', ''),
    evaluationBackend: c.get<string>('evaluationBackend', 'local') || 'local',
    rayAddress: c.get<string>('rayAddress', ''),
    storePath: expand(c.get<string>('storePath', '')),
    keepLaunch: c.get<boolean>('keepLaunch', false),
    maxDocumentSize: c.get<number>('maxDocumentSize', 1_000_000),
    trusted: vscode.workspace.isTrusted,
    codeLensEnabled: c.get<boolean>('codeLens.enabled', true),
    hintsExclude: c.get<string[]>('hints.exclude', []),
    hintsMinSeverity: c.get<string>('hints.minSeverity', 'hint'),
  };
}

/** Settings object for the server, with the API key from the secret store (never from settings). */
export async function serverOptions(secrets: vscode.SecretStorage): Promise<{ warpforge: ServerSettings }> {
  const apiKey = (await secrets.get(API_KEY_SECRET)) ?? '';
  return { warpforge: { ...serverSettings(), apiKey } };
}

/** ${workspaceFolder}, ${userHome} and a leading ~ in path settings. */
export function expand(value: string): string {
  if (!value) {
    return value;
  }
  const home = process.env.HOME ?? process.env.USERPROFILE ?? '';
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? '';
  return value
    .replace(/^~(?=$|[\\/])/, home)
    .replace(/\$\{userHome\}/g, home)
    .replace(/\$\{workspaceFolder\}/g, folder);
}

// The WarpForge-specific parts of the protocol spoken by `warpforge serve` (server/warpforge/lsp/).
// Standard LSP (diagnostics, code actions, code lenses, work-done progress, applyEdit) is handled by
// vscode-languageclient; these are the commands, notifications and requests on top of it.

/** workspace/executeCommand names the server registers. */
export const Cmd = {
  optimize: 'warpforge.optimize', // [uri, kernel, strategy] -> OptimizeResult
  cancel: 'warpforge.cancel', // [job]
  accept: 'warpforge.accept', // [job, candidate] -> AcceptResult (the server sends workspace/applyEdit)
  reject: 'warpforge.reject', // [job, candidate]
  showCandidate: 'warpforge.showCandidate', // [job, candidate] -> CandidateTexts
  addSpec: 'warpforge.addSpec', // [uri, kernel] -> {applied}
  profile: 'warpforge.profile', // [uri, kernel] -> {job, token}; jobDone with kind "profile"
} as const;

export const CandidateNotification = 'warpforge/candidate';
export const JobDoneNotification = 'warpforge/jobDone';
export const SearchTreeRequest = 'warpforge/searchTree';

/** Progress tokens of optimize jobs start with this (the server's Job.token). */
export const JOB_TOKEN_PREFIX = 'warpforge-';

export interface OptimizeResult {
  job: string;
  token: string;
}

export interface AcceptResult {
  applied: boolean;
  reason?: string | null;
}

export interface CandidateTexts {
  job: string;
  candidate: string;
  uri: string;
  kernel: string;
  speedup: number | null;
  /** the whole file as the job saw it */
  original: string;
  /** the whole file with the candidate applied */
  variant: string;
}

export interface CandidateParams {
  job: string;
  uri: string;
  kernel: string;
  candidate: string;
  speedup: number;
  spread?: number | null;
  gpu?: string;
  family?: string;
  families?: string[];
  rationale?: string;
  diff?: string;
  evidence?: Record<string, unknown>;
}

export interface JobDoneParams {
  job: string;
  uri: string;
  kernel: string;
  state: 'done' | 'cancelled' | 'failed' | string;
  outcome: 'improved' | string;
  message: string;
  candidate: string | null;
  speedup: number | null;
  evaluations: number;
}

export interface TreeNode {
  id: number;
  parent: number | null;
  family: string;
  rationale: string;
  status: string;
  reason: string;
  speedup: number | null;
  depth: number;
  visits?: number;
  eval_index: number | null;
  children: number[];
}

export interface SearchTree {
  job: string;
  kernel: string;
  uri: string;
  strategy: string;
  state: string;
  message: string;
  nodes: TreeNode[];
  history: { evaluations: number; best_speedup: number }[];
  best?: number;
  best_speedup?: number;
  evaluations?: number;
  stopped?: string;
}

// The WarpForge-specific parts of the protocol spoken by `warpforge serve` (server/warpforge/lsp/).
// Standard LSP (diagnostics, code actions, code lenses, work-done progress, applyEdit) is handled by
// vscode-languageclient; these are the commands, notifications and requests on top of it.
// Mirrored on the server by server/warpforge/lsp/protocol.py (tests/test_protocol.py compares the two):
// a field without `?` is always sent (null where it has no value), a field with `?` may be left out.

/** workspace/executeCommand names the server registers. */
export const Cmd = {
  optimize: 'warpforge.optimize', // [uri, kernel, strategy] -> OptimizeResult
  cancel: 'warpforge.cancel', // [job] -> CancelResult
  accept: 'warpforge.accept', // [job, candidate] -> AcceptResult (the server sends workspace/applyEdit)
  reject: 'warpforge.reject', // [job, candidate] -> RejectResult
  showCandidate: 'warpforge.showCandidate', // [job, candidate] -> CandidateTexts
  addSpec: 'warpforge.addSpec', // [uri, kernel] -> AddSpecResult
  profile: 'warpforge.profile', // [uri, kernel] -> ProfileResult; jobDone with kind "profile"
  acceptHunks: 'warpforge.acceptHunks', // [job, candidate, hunk indices] -> AcceptResult (only those hunks)
  specNotice: 'warpforge.specNotice', // [message] -> null; the server shows it (run after "Add benchmark spec")
} as const;

export const CandidateNotification = 'warpforge/candidate';
export const JobDoneNotification = 'warpforge/jobDone';
export const SearchTreeRequest = 'warpforge/searchTree';
export const GpuStatusRequest = 'warpforge/gpuStatus';
export const AnalysisNotification = 'warpforge/analysis';

/** Progress tokens of optimize jobs start with this (the server's Job.token). */
export const JOB_TOKEN_PREFIX = 'warpforge-';

export interface OptimizeResult {
  job: string;
  token: string;
}

export interface ProfileResult {
  job: string;
  token: string;
}

export interface CancelResult {
  cancelled: string;
}

export interface AcceptResult {
  applied: boolean;
  reason?: string | null;
  /** the host launch sites the accepted variant changes (`file:line: old -> new`) */
  launch_changes?: string[];
  /** the launch sites that still need a change by hand (each says what to write), not applied */
  needs_launch_change?: string[];
  /** set when the applied variant is a build change: the project's build must add a flag */
  notice?: string | null;
}

export interface RejectResult {
  rejected: boolean;
}

export interface AddSpecResult {
  applied: boolean;
}

/** One change of a variant's diff: document lines [old_start, old_end) become variant lines
 *  [new_start, new_end), 0-based; `index` is what acceptHunks names. */
export interface DiffHunk {
  index: number;
  old_start: number;
  old_end: number;
  new_start: number;
  new_end: number;
}

export interface CandidateTexts {
  job: string;
  candidate: string;
  uri: string;
  kernel: string;
  speedup: number | null;
  family: string;
  status: string;
  /** the whole file as the job saw it */
  original: string;
  /** the whole file with the candidate applied */
  variant: string;
  /** the changes from original to variant, each acceptable alone (acceptHunks) */
  hunks?: DiffHunk[];
}

/** What was measured and checked for a verified variant. */
export interface Evidence {
  headline?: string;
  /** what the correctness check compared, in words */
  checked?: string;
  /** how many random inputs the variant was checked on */
  seeds?: number;
  /** the problem sizes it was checked at (the spec's, and an odd one when the spec is symbolic) */
  sizes?: string[];
  /** the speedup's 95 % interval */
  interval?: [number, number];
  /** the back-to-back ("hot", L2 warm) speedup, where it differs from the cold one by more than the interval */
  hot?: number;
}

/** A measured time against the kernel's physical limit (the roofline). */
export interface PhysicalLimit {
  /** in words: "84 % of the memory limit (403 MB at the measured copy bandwidth, 3000 GB/s)", or why unknown */
  text: string;
  bound?: 'memory' | 'compute' | string;
  /** % of the bound's limit */
  pct_limit?: number;
  /** % of the measured copy bandwidth, whatever the bound */
  pct_copy_bw?: number;
  /** the bound's least time, in ms */
  floor_ms?: number;
}

export interface CandidateParams {
  job: string;
  uri: string;
  kernel: string;
  candidate: string;
  speedup: number;
  /** relative half-width of the speedup's interval (0.02: ±2 %) */
  spread?: number | null;
  gpu?: string;
  family?: string;
  families?: string[];
  rationale?: string;
  diff?: string;
  evidence?: Evidence;
  /** the variant's time against the kernel's physical limit */
  limit?: PhysicalLimit;
  /** each host launch site the variant's launch changes (`file:line: old -> new`) */
  launch_changes?: string[];
  /** a launch site cannot be rewritten for it: accepting it needs a launch change by hand */
  needs_launch_change?: boolean;
}

export interface JobDoneParams {
  job: string;
  kind: 'optimize' | 'profile' | string;
  uri: string;
  kernel: string;
  state: 'done' | 'cancelled' | 'failed' | string;
  outcome: 'improved' | string;
  message: string;
  candidate: string | null;
  speedup: number | null;
  evaluations: number;
  /** profile jobs: the bottleneck class, when one was measured */
  class?: string | null;
  /** profile jobs: what was missing (no ncu, no GPU), when something was */
  notice?: string | null;
  /** profile jobs: how many findings the profile gave */
  findings?: number;
  /** optimize jobs: why the search stopped ("within 5 % of the physical limit: ...", "time budget spent") */
  stopped?: string;
  /** optimize jobs: the result's time (the best variant's, else the original's) against the physical limit */
  limit?: PhysicalLimit;
  /** optimize jobs: variants offered during the search that the winner's checks turned down (sanitizer, Nsight Compute) */
  withdrawn?: Withdrawn[];
  /** optimize jobs: the result's back-to-back ("hot", L2 warm) speedup, where it differs from the cold one by more than the interval */
  hot?: number;
}

/** A variant offered during the search that the winner's checks turned down, and why. */
export interface Withdrawn {
  candidate: string;
  reason: string;
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
  visits: number;
  eval_index: number | null;
  children: number[];
  /** ok with every verification run made (false: its checks stopped early, clearly slower than the best) */
  verified?: boolean;
}

export interface SearchTree {
  job: string;
  kernel: string;
  uri: string;
  strategy: string;
  state: string;
  message: string;
  nodes: TreeNode[];
  history: HistoryPoint[];
  best?: number;
  best_speedup?: number;
  evaluations?: number;
  stopped?: string;
  seconds?: number;
  rounds?: number;
}

export interface HistoryPoint {
  evaluations: number;
  best_speedup: number;
  /** seconds from the job's start */
  seconds?: number | null;
}

/** What GPU work the server can run (asked at start and after a settings change; no params). */
export interface GpuStatus {
  /** one line: the GPUs (or the Ray cluster / plug-in evaluator) variants are measured on, or why none */
  summary: string;
  can_optimize: boolean;
  can_profile: boolean;
  /** why GPU work cannot run on the server's machine ("" when it can) */
  reason: string;
  /** what to do instead ("" when nothing is needed) */
  advice: string;
  backend: string;
  gpus: string[];
  driver: string;
  /** nvcc, ncu, compute_sanitizer, pycuda: where each was found, or "not found" */
  tools: Record<string, string>;
}

/** warpforge/analysis: where the hints of a document are ("source", "compiler" or "done"). */
export interface AnalysisParams {
  uri: string;
  phase: string;
}

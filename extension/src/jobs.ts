// Optimize jobs as the user sees them: start (with the trust check), a cancellable progress notification
// mirroring the server's work-done progress, the "N× faster" notification with View Diff · Accept ·
// Reject, and accept/reject through the server (which edits the buffer with workspace/applyEdit).
import * as vscode from 'vscode';
import { ProgressToken, ResponseError } from 'vscode-languageclient/node';
import {
  AcceptResult,
  CandidateParams,
  CandidateTexts,
  Cmd,
  JOB_TOKEN_PREFIX,
  JobDoneParams,
  OptimizeResult,
  PhysicalLimit,
  ProfileResult,
} from './protocol';
import { ProgressValue, Server, errorText } from './server';
import { VariantRef, Variants } from './variants';

export interface Job {
  id: string;
  token: string;
  uri: string;
  kernel: string;
  strategy: string;
  state: string; // running | done | cancelled | failed
  message: string;
  started: number;
  evaluations: number;
  candidates: Map<string, CandidateParams>;
  best?: CandidateParams;
  /** the result against the kernel's physical limit (the best variant's, else the original's) */
  limit?: PhysicalLimit;
  /** why the search stopped */
  stopped?: string;
  /** candidates accepted or rejected */
  resolved: Set<string>;
  /** the fastest of its variants the user rejected (0: none); a variant no faster is offered as the next best,
   *  as the lens does */
  rejected: number;
  /** the user took a variant (or some of its changes): the job's variants describe the old text, none waits */
  accepted: boolean;
  cancelling: boolean;
}

/** What a finished job left, in words, and what the user can still do about it (search view, status bar). */
export interface JobResult {
  text: string;
  /** the variant waiting for review, when one is */
  candidate?: string;
  /** 'pending' | 'accepted' | 'rejected' | 'none' | 'running' */
  state: string;
}

/** A progress notification fed by the server's work-done progress for one job. */
class JobProgress {
  private progress: vscode.Progress<{ message?: string; increment?: number }> | undefined;
  private finish: (() => void) | undefined;
  private reported = 0;
  private lastMessage = '';

  constructor(title: string, onCancel: () => void) {
    void vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title, cancellable: true },
      (progress, token) => {
        this.progress = progress;
        if (this.lastMessage) {
          progress.report({ message: this.lastMessage, increment: this.reported });
        }
        token.onCancellationRequested(onCancel);
        return new Promise<void>((resolve) => {
          this.finish = resolve;
        });
      },
    );
  }

  update(value: ProgressValue): void {
    if (value.kind === 'end') {
      return; // jobDone closes the notification, with the outcome
    }
    const message = value.message ?? this.lastMessage;
    let increment: number | undefined;
    if (typeof value.percentage === 'number') {
      const pct = Math.max(0, Math.min(100, value.percentage));
      increment = Math.max(0, pct - this.reported);
      this.reported += increment;
    }
    this.lastMessage = message;
    this.progress?.report({ message, increment });
  }

  close(): void {
    this.finish?.();
    this.finish = undefined;
  }
}

export class Jobs implements vscode.Disposable {
  readonly jobs = new Map<string, Job>();
  private readonly progress = new Map<string, JobProgress>(); // by token
  private readonly early = new Map<string, ProgressValue[]>(); // progress that came before the job id
  private readonly changed = new vscode.EventEmitter<Job | undefined>();
  /** fires when a job starts, improves, finishes, or a variant is accepted/rejected (undefined: all gone) */
  readonly onDidChange = this.changed.event;
  private readonly status: vscode.StatusBarItem;

  constructor(
    private readonly server: Server,
    private readonly variants: Variants,
    private readonly log: vscode.OutputChannel,
    /** may this job start here (a GPU to measure on)? says why not itself */
    private readonly allows: (what: 'optimize' | 'profile', kernel: string) => Promise<boolean> = async () => true,
  ) {
    this.status = vscode.window.createStatusBarItem('warpforge.jobs', vscode.StatusBarAlignment.Left, 50);
    this.status.name = 'WarpForge jobs';
    this.updateUi();
  }

  // ------------------------------------------------------------------ start / cancel

  /** Optimize `kernel` in the document `uri` (server URI). Refused with an explanation in Restricted Mode. */
  async optimize(uri: string, kernel: string, strategy?: string): Promise<Job | undefined> {
    if (!vscode.workspace.isTrusted) {
      void explainRestricted('Optimize Kernel');
      return undefined;
    }
    if (!(await this.allows('optimize', kernel))) {
      return undefined;
    }
    const chosen = strategy || vscode.workspace.getConfiguration('warpforge').get<string>('strategy', 'beam');
    let res: OptimizeResult;
    try {
      res = await this.server.command<OptimizeResult>(Cmd.optimize, [uri, kernel, chosen]);
    } catch (e) {
      void this.userError(`cannot optimize ${kernel}`, e, uri, kernel);
      return undefined;
    }
    const job: Job = {
      id: res.job,
      token: res.token,
      uri,
      kernel,
      strategy: chosen,
      state: 'running',
      message: '',
      started: Date.now(),
      evaluations: 0,
      candidates: new Map(),
      resolved: new Set(),
      rejected: 0,
      accepted: false,
      cancelling: false,
    };
    this.jobs.set(job.id, job);
    this.log.appendLine(`[client] ${job.id}: optimizing ${kernel} (${chosen} search)`);
    const ui = new JobProgress(`WarpForge: optimizing ${kernel}`, () => void this.cancel(job.id));
    this.progress.set(job.token, ui);
    ui.update({ kind: 'report', message: `${chosen} search: starting` });
    for (const v of this.early.get(job.token) ?? []) {
      ui.update(v);
    }
    this.early.delete(job.token);
    this.updateUi(job);
    return job;
  }

  /** Profile Kernel: Nsight Compute on the GPU; the server's progress shows while it runs, and its
   * measured findings replace the kernel's static hints in the Problems panel when it ends. */
  async profile(uri: string, kernel: string): Promise<string | undefined> {
    if (!vscode.workspace.isTrusted) {
      void explainRestricted('Profile Kernel');
      return undefined;
    }
    if (!(await this.allows('profile', kernel))) {
      return undefined;
    }
    try {
      const res = await this.server.command<ProfileResult>(Cmd.profile, [uri, kernel]);
      this.log.appendLine(`[client] ${res.job}: profiling ${kernel}`);
      return res.job;
    } catch (e) {
      void this.userError(`cannot profile ${kernel}`, e, uri, kernel);
      return undefined;
    }
  }

  /** A refusal as one line; a spec mistake (the server names its fix) gets the button that fixes it. */
  private async userError(what: string, e: unknown, uri: string, kernel: string): Promise<void> {
    const fix = e instanceof ResponseError && (e.data as { fix?: string } | undefined)?.fix;
    if (fix !== 'addSpec') {
      void vscode.window.showErrorMessage(`WarpForge: ${what}: ${errorText(e)}`);
      return;
    }
    const choice = await vscode.window.showErrorMessage(`WarpForge: ${what}: ${errorText(e)}`, 'Add Benchmark Spec');
    if (choice) {
      try {
        await this.server.command(Cmd.addSpec, [uri, kernel]);
      } catch (err) {
        void vscode.window.showErrorMessage(`WarpForge: cannot add a spec: ${errorText(err)}`);
      }
    }
  }

  private profileDone(p: JobDoneParams): void {
    this.log.appendLine(`[client] ${p.job}: ${p.state}: ${p.message}`);
    if (p.state === 'cancelled') {
      return;
    }
    if (p.state !== 'done') {
      void vscode.window.showErrorMessage(`WarpForge: profiling ${p.kernel} failed: ${p.message}`);
      return;
    }
    const text = p.class
      ? `${p.kernel} is ${p.class} — ${p.findings ?? 0} profiler findings in Problems`
      : `${p.kernel}: ${p.notice ?? 'static findings only'}`;
    void vscode.window.showInformationMessage(`WarpForge: ${text}`, 'Show Problems').then((choice) => {
      if (choice === 'Show Problems') {
        void vscode.commands.executeCommand('workbench.actions.view.problems');
      }
    });
  }

  async cancel(jobId: string): Promise<void> {
    const job = this.jobs.get(jobId);
    if (job) {
      job.cancelling = true;
      this.updateUi(job);
    }
    try {
      await this.server.command(Cmd.cancel, [jobId]);
      this.log.appendLine(`[client] ${jobId}: cancel requested`);
    } catch (e) {
      void vscode.window.showErrorMessage(`WarpForge: cannot cancel ${jobId}: ${errorText(e)}`);
    }
  }

  running(): Job[] {
    return [...this.jobs.values()].filter((j) => j.state === 'running');
  }

  /** Jobs, newest first. */
  all(): Job[] {
    return [...this.jobs.values()].sort((a, b) => b.started - a.started);
  }

  /** The job's verified variants still open to review: its result first while it is on offer (the search's
   *  choice: among equal speeds, or a launch that can be written over a faster one), then the fastest first
   *  (none once one was accepted: they describe the old text). The server's lens offers the first of these too. */
  open(job: Job): CandidateParams[] {
    if (job.accepted) {
      return [];
    }
    const list = [...job.candidates.values()]
      .filter((c) => !job.resolved.has(c.candidate))
      .sort((a, b) => b.speedup - a.speedup);
    const result = job.state === 'running' ? undefined : job.best;
    const at = result ? list.findIndex((c) => c.candidate === result.candidate) : -1;
    if (at > 0) {
      list.unshift(...list.splice(at, 1));
    }
    return list;
  }

  /** The variant of each job waiting for review (the best not yet rejected), newest job first. */
  pending(): { job: Job; candidate: CandidateParams }[] {
    const out: { job: Job; candidate: CandidateParams }[] = [];
    for (const job of this.all()) {
      const first = job.state === 'running' ? undefined : this.open(job)[0];
      if (first) {
        out.push({ job, candidate: first });
      }
    }
    return out;
  }

  /** Whether `c` is offered because the job's result was rejected (the lens says "next best" then; a variant as
   *  fast as a rejected one is not "next" to the result that is still on offer). */
  static isNextBest(job: Job, c: CandidateParams): boolean {
    if (job.rejected <= 0) {
      return false;
    }
    const result = job.state === 'running' ? undefined : job.best;
    return result ? job.resolved.has(result.candidate) && c.candidate !== result.candidate : job.rejected >= c.speedup;
  }

  /** What the job left, in words (the search view keeps it, the toast fades). */
  result(job: Job): JobResult {
    if (job.state === 'running') {
      return { state: 'running', text: `Optimizing ${job.kernel}…` };
    }
    const next = this.open(job)[0];
    if (next) {
      const which = Jobs.isNextBest(job, next) ? 'Next best: ' : 'Result: ';
      return { state: 'pending', candidate: next.candidate, text: which + this.verifiedText(job, next) };
    }
    if (job.accepted) {
      return { state: 'accepted', text: `Accepted: the variant of ${job.kernel} is in the buffer (not saved; Undo reverts it).` };
    }
    if (job.candidates.size > 0) {
      return { state: 'rejected', text: `All ${job.candidates.size} verified variants of ${job.kernel} rejected; the file is unchanged.` };
    }
    return { state: 'none', text: `No verified faster variant of ${job.kernel}${job.message ? ` (${job.message})` : ''}.` };
  }

  // ------------------------------------------------------------------ from the server

  workDoneProgress(token: ProgressToken, value: ProgressValue): boolean {
    if (typeof token !== 'string' || !token.startsWith(JOB_TOKEN_PREFIX)) {
      return false;
    }
    const ui = this.progress.get(token);
    if (ui) {
      ui.update(value);
    } else if (value.kind !== 'end') {
      // the job's begin can overtake the reply to warpforge.optimize: keep it for the job's notification
      const list = this.early.get(token) ?? [];
      list.push(value);
      this.early.set(token, list);
    } else {
      this.early.delete(token);
    }
    return true;
  }

  candidate(p: CandidateParams): void {
    let job = this.jobs.get(p.job);
    if (!job) {
      // a job started outside this window's commands (e.g. by another client of a shared server)
      job = {
        id: p.job, token: '', uri: p.uri, kernel: p.kernel, strategy: '', state: 'running', message: '',
        started: Date.now(), evaluations: 0, candidates: new Map(), resolved: new Set(), rejected: 0, accepted: false,
        cancelling: false,
      };
      this.jobs.set(job.id, job);
    }
    job.candidates.set(p.candidate, p);
    if (!job.best || p.speedup > job.best.speedup) {
      job.best = p;
    }
    this.log.appendLine(
      `[client] ${p.job}: verified ${p.speedup.toFixed(2)}× (${(p.families ?? [p.family]).join(' + ')}) on ${p.gpu ?? '?'}` +
        (p.limit ? `; ${p.limit.text}` : ''),
    );
    this.updateUi(job);
  }

  jobDone(p: JobDoneParams): void {
    if (p.kind === 'profile') {
      this.profileDone(p);
      return;
    }
    const job = this.jobs.get(p.job);
    if (!job) {
      return;
    }
    job.state = p.state;
    job.message = p.message;
    job.evaluations = p.evaluations;
    job.limit = p.limit ?? job.limit;
    job.stopped = p.stopped ?? job.stopped;
    if (p.candidate && !job.candidates.has(p.candidate) && p.speedup != null) {
      job.candidates.set(p.candidate, { job: p.job, uri: p.uri, kernel: p.kernel, candidate: p.candidate, speedup: p.speedup });
    }
    for (const w of p.withdrawn ?? []) {
      // offered during the search, turned down by the winner's checks (sanitizer, Nsight Compute): no longer offered
      job.candidates.delete(w.candidate);
      this.log.appendLine(`[client] ${p.job}: withdrawn ${w.candidate}: ${w.reason}`);
    }
    if (p.candidate) {
      job.best = job.candidates.get(p.candidate) ?? job.best;
    }
    if (job.best && p.hot != null && p.candidate === job.best.candidate) {
      job.best.evidence = { ...job.best.evidence, hot: p.hot };
    }
    this.progress.get(job.token)?.close();
    this.progress.delete(job.token);
    this.log.appendLine(
      `[client] ${job.id}: ${p.state} after ${p.evaluations} evaluations: ${p.message}` +
        (p.stopped ? ` (stopped: ${p.stopped})` : ''),
    );
    this.updateUi(job);
    void this.announce(job, p);
  }

  stopped(): void {
    let any = false;
    for (const job of this.jobs.values()) {
      if (job.state === 'running') {
        job.state = 'failed';
        job.message = 'the server stopped';
        any = true;
      }
    }
    for (const ui of this.progress.values()) {
      ui.close();
    }
    this.progress.clear();
    this.early.clear();
    this.jobs.clear(); // the server's job ids are gone with it
    this.variants.clear();
    void this.variants.close(() => true);
    if (any) {
      void vscode.window.showWarningMessage('WarpForge: the server stopped; its running jobs are gone.');
    }
    this.updateUi(undefined);
  }

  // ------------------------------------------------------------------ the outcome

  private verifiedText(job: Job, c: CandidateParams): string {
    const parts = [c.gpu ? `verified on ${c.gpu}` : 'verified'];
    if (typeof c.spread === 'number' && c.spread > 0) {
      parts.push(`±${(c.spread * 100).toFixed(1)}%`);
    }
    const n = c.evidence?.seeds;
    const odd = (c.evidence?.sizes?.length ?? 0) > 1 ? 'odd size' : '';
    const runs = [n ? `${n} seeds` : '', odd].filter(Boolean).join(' + ');
    if (runs) {
      parts.push(runs);
    }
    const hot = c.evidence?.hot;
    if (hot != null) {
      // the claim is the cold figure (L2 flushed before each launch); the warm one differs by more than its interval
      parts.push(`cold; back-to-back (hot, L2 warm): ${hot.toFixed(2)}×`);
    }
    const limit = this.limitText(job, c);
    return `${c.speedup.toFixed(2)}× faster ${job.kernel} (${parts.join(', ')})${limit ? `; now at ${limit}` : ''}${Jobs.launchText(c)}`;
  }

  /** Labels a variant whose launch cannot be written at every host launch site ('' otherwise). */
  private static launchText(c: CandidateParams): string {
    if (!c.needs_launch_change) {
      return '';
    }
    const manual = (c.launch_changes ?? []).filter((line) => line.includes('needs a launch change'));
    return ` — NEEDS A LAUNCH CHANGE by hand: ${manual.join('; ') || 'see the diff'}`;
  }

  /** The variant's time against the physical limit, in words ('' when the spec gives no bytes or flops). */
  private limitText(job: Job, c: CandidateParams): string {
    const limit = job.best?.candidate === c.candidate && job.limit ? job.limit : c.limit;
    return limit && limit.pct_limit != null ? limit.text : '';
  }

  /** "within 5 % of the physical limit" when that is why the search stopped ('' otherwise). */
  private static atLimit(p: JobDoneParams): string {
    return p.stopped && p.stopped.startsWith('within') ? ' The search stopped: nothing is left to gain there.' : '';
  }

  private async announce(job: Job, p: JobDoneParams): Promise<void> {
    const best = p.candidate ? job.candidates.get(p.candidate) : undefined;
    if (p.outcome === 'improved' && best) {
      const prefix = p.state === 'cancelled' ? 'WarpForge (cancelled, best so far): ' : 'WarpForge: ';
      const choice = await vscode.window.showInformationMessage(
        prefix + this.verifiedText(job, best) + Jobs.atLimit(p),
        'View Diff',
        'Accept',
        'Reject',
      );
      if (choice === 'View Diff') {
        await this.view(job.id, best.candidate);
      } else if (choice === 'Accept') {
        await this.accept(job.id, best.candidate);
      } else if (choice === 'Reject') {
        await this.reject(job.id, best.candidate);
      }
      return;
    }
    if (p.state === 'cancelled') {
      void vscode.window.showInformationMessage(`WarpForge: optimization of ${job.kernel} cancelled.`);
    } else if (p.state === 'failed') {
      const c = await vscode.window.showErrorMessage(
        `WarpForge: optimization of ${job.kernel} failed: ${p.message}`,
        'Show Output',
      );
      if (c) {
        this.log.show();
      }
    } else {
      const c = await vscode.window.showInformationMessage(
        `WarpForge: no verified faster variant of ${job.kernel} (${p.evaluations} tried; ${p.message}).`,
        'Show Search',
      );
      if (c) {
        await vscode.commands.executeCommand('warpforge.showSearch', job.id);
      }
    }
  }

  // ------------------------------------------------------------------ view / accept / reject

  async view(jobId: string, candidate: string, fromSearchView = false): Promise<void> {
    let t: CandidateTexts;
    try {
      t = await this.server.command<CandidateTexts>(Cmd.showCandidate, [jobId, candidate]);
    } catch (e) {
      void vscode.window.showErrorMessage(`WarpForge: cannot show the variant: ${errorText(e)}`);
      return;
    }
    const job = this.jobs.get(jobId);
    const c = job?.candidates.get(t.candidate) ?? job?.candidates.get(candidate);
    const speed = t.speedup != null ? `${t.speedup.toFixed(2)}× faster variant` : 'variant (not verified faster)';
    const families = c?.families?.length ? ` — ${c.families.join(' + ')}` : '';
    await this.variants.open(
      // the search view opens nodes by id; the diff carries the candidate's own id back to accept/reject
      { ...t, candidate: c?.candidate ?? t.candidate },
      `${t.kernel}: current ↔ ${speed}${families}`,
      !fromSearchView,
    );
  }

  async accept(jobId: string, candidate: string): Promise<boolean> {
    const job = this.jobs.get(jobId);
    let res: AcceptResult;
    try {
      res = await this.server.command<AcceptResult>(Cmd.accept, [jobId, candidate]);
    } catch (e) {
      void vscode.window.showErrorMessage(`WarpForge: cannot accept the variant: ${errorText(e)}`);
      return false;
    }
    if (!res.applied) {
      void vscode.window.showErrorMessage(
        `WarpForge: the editor did not apply the variant${res.reason ? ` (${res.reason})` : ''}; the file may have changed meanwhile. Run Optimize Kernel again.`,
      );
      return false;
    }
    job?.resolved.add(candidate);
    this.actedOn(job);
    const c = job?.candidates.get(candidate);
    this.log.appendLine(`[client] ${jobId}: accepted ${candidate}`);
    await this.variants.close((r) => r.job === jobId);
    if (job) {
      const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(job.uri));
      await vscode.window.showTextDocument(doc, { preview: false });
    }
    this.updateUi(job);
    const sites = res.launch_changes?.length
      ? ` and its launch at ${res.launch_changes.length} host launch site${res.launch_changes.length === 1 ? '' : 's'}`
      : '';
    void vscode.window.showInformationMessage(
      `WarpForge: applied the ${c ? `${c.speedup.toFixed(2)}× ` : ''}variant of ${job?.kernel ?? '?'}${sites} (not saved; Undo reverts it).`,
    );
    for (const line of res.launch_changes ?? []) {
      this.log.appendLine(`[client] ${jobId}: launch updated: ${line}`);
    }
    if (res.needs_launch_change?.length) {
      // launches WarpForge could not rewrite: the program is only correct once they are changed by hand
      for (const line of res.needs_launch_change) {
        this.log.appendLine(`[client] ${jobId}: ${line}`);
      }
      void vscode.window.showWarningMessage(
        `WarpForge: ${res.needs_launch_change.length} launch site${res.needs_launch_change.length === 1 ? '' : 's'} of ${job?.kernel ?? '?'} need a launch change by hand: ${res.needs_launch_change.join('; ')}`,
      );
    }
    if (res.notice) {
      void vscode.window.showWarningMessage(`WarpForge: ${res.notice}`);
    }
    return true;
  }

  async reject(jobId: string, candidate: string): Promise<boolean> {
    const job = this.jobs.get(jobId);
    try {
      await this.server.command(Cmd.reject, [jobId, candidate]);
    } catch (e) {
      void vscode.window.showErrorMessage(`WarpForge: cannot reject the variant: ${errorText(e)}`);
      return false;
    }
    const c = job?.candidates.get(candidate);
    if (job && c && !job.resolved.has(candidate)) {
      job.rejected = Math.max(job.rejected, c.speedup);
    }
    job?.resolved.add(candidate);
    this.log.appendLine(`[client] ${jobId}: rejected ${candidate}`);
    await this.variants.close((r) => r.job === jobId && r.candidate === candidate);
    this.updateUi(job);
    const next = job ? this.open(job)[0] : undefined;
    const rejected = `WarpForge: rejected the ${c ? `${c.speedup.toFixed(2)}× ` : ''}variant of ${job?.kernel ?? '?'}; the file is unchanged.`;
    if (!next) {
      void vscode.window.showInformationMessage(rejected);
      return true;
    }
    const offer = job && Jobs.isNextBest(job, next) ? `Next best: ${next.speedup.toFixed(2)}×.` : `Still on offer: the ${next.speedup.toFixed(2)}× variant.`;
    void vscode.window.showInformationMessage(`${rejected} ${offer}`, 'View It').then((choice) => {
      if (choice && job) {
        void this.view(job.id, next.candidate);
      }
    });
    return true;
  }

  /** The user took (part of) a variant of `job`: the variants of every finished job on that kernel describe
   *  the old text now, none is offered any more (the server drops them from the lens alike). */
  private actedOn(job: Job | undefined): void {
    for (const j of job ? this.jobs.values() : []) {
      if (job && j.uri === job.uri && j.kernel === job.kernel && j.state !== 'running') {
        j.accepted = true;
      }
    }
  }

  /** Apply only some changes (hunks) of a variant; the server checks the result still is a kernel. */
  async acceptHunks(jobId: string, candidate: string, hunks: number[], total: number): Promise<boolean> {
    const job = this.jobs.get(jobId);
    let res: AcceptResult;
    try {
      res = await this.server.command<AcceptResult>(Cmd.acceptHunks, [jobId, candidate, hunks]);
    } catch (e) {
      void vscode.window.showErrorMessage(`WarpForge: ${errorText(e)}`);
      return false;
    }
    if (!res.applied) {
      void vscode.window.showErrorMessage(
        `WarpForge: the editor did not apply the changes${res.reason ? ` (${res.reason})` : ''}; the file may have changed meanwhile.`,
      );
      return false;
    }
    job?.resolved.add(candidate);
    this.actedOn(job);
    this.log.appendLine(`[client] ${jobId}: accepted changes ${hunks.map((h) => h + 1).join(', ')} of ${total} of ${candidate}`);
    await this.variants.close((r) => r.job === jobId);
    if (job) {
      const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(job.uri));
      await vscode.window.showTextDocument(doc, { preview: false });
    }
    this.updateUi(job);
    const n = hunks.length;
    void vscode.window.showInformationMessage(
      `WarpForge: applied ${n} of the ${total} changes of the variant of ${job?.kernel ?? '?'} (not saved; Undo reverts it). ` +
        'This combination was not measured: run Optimize Kernel to verify it.',
    );
    return true;
  }

  /** The next verified variant of the job after `ref` (fastest first, wrapping), or undefined with a message. */
  nextOf(ref: VariantRef): VariantRef | undefined {
    const job = this.jobs.get(ref.job);
    const list = job ? this.open(job) : [];
    const others = list.filter((c) => c.candidate !== ref.candidate);
    if (!job || others.length === 0) {
      void vscode.window.showInformationMessage(
        `WarpForge: no other verified variant of ${job?.kernel ?? 'this kernel'} to review.`,
      );
      return undefined;
    }
    const at = list.findIndex((c) => c.candidate === ref.candidate);
    const next = at < 0 ? list[0] : list[(at + 1) % list.length];
    return { job: job.id, candidate: next.candidate };
  }

  /** The variant a command means: its argument (a warpforge-variant URI from the editor title bar, or
   *  [job, candidate]), else the active diff editor's, else the only pending one, else the user picks. */
  async resolveVariant(args: unknown[]): Promise<VariantRef | undefined> {
    const [a, b] = args;
    if (typeof a === 'string' && typeof b === 'string') {
      return { job: a, candidate: b };
    }
    const fromUri = a instanceof vscode.Uri ? Variants.parse(a) : undefined;
    if (fromUri) {
      return fromUri;
    }
    const active = Variants.active();
    if (active) {
      return active;
    }
    const pending = this.pending();
    if (pending.length === 0) {
      void vscode.window.showInformationMessage('WarpForge: no variant is waiting; run Optimize Kernel first.');
      return undefined;
    }
    if (pending.length === 1) {
      return { job: pending[0].job.id, candidate: pending[0].candidate.candidate };
    }
    const pick = await vscode.window.showQuickPick(
      pending.map((p) => ({
        label: `${p.job.kernel}: ${p.candidate.speedup.toFixed(2)}× faster`,
        description: `${vscode.workspace.asRelativePath(vscode.Uri.parse(p.job.uri))} · ${p.job.id}`,
        ref: { job: p.job.id, candidate: p.candidate.candidate },
      })),
      { placeHolder: 'Which variant?' },
    );
    return pick?.ref;
  }

  // ------------------------------------------------------------------ status bar and context keys

  private updateUi(job?: Job): void {
    const running = this.running();
    const pending = this.pending();
    void vscode.commands.executeCommand('setContext', 'warpforge.hasJobs', this.jobs.size > 0);
    void vscode.commands.executeCommand('setContext', 'warpforge.hasRunningJobs', running.length > 0);
    void vscode.commands.executeCommand('setContext', 'warpforge.hasVariants', pending.length > 0);
    if (running.length > 0) {
      const j = running[0];
      const best = j.best ? ` · best ${j.best.speedup.toFixed(2)}×` : '';
      const more = running.length > 1 ? ` (+${running.length - 1})` : '';
      this.status.text = `$(sync~spin) WarpForge: ${j.kernel}${j.cancelling ? ' (cancelling…)' : ''}${best}${more}`;
      this.status.tooltip = 'Optimizing: click to show the search';
      this.status.command = { title: 'Show Search', command: 'warpforge.showSearch', arguments: [j.id] };
      this.status.show();
    } else if (pending.length > 0) {
      const p = pending[0];
      const pct = p.job.best?.candidate === p.candidate.candidate ? p.job.limit?.pct_limit : p.candidate.limit?.pct_limit;
      this.status.text =
        `$(rocket) WarpForge: ${Jobs.isNextBest(p.job, p.candidate) ? 'next best ' : ''}${p.candidate.speedup.toFixed(2)}× ${p.job.kernel} ready` +
        (pct != null ? ` · ${pct.toFixed(0)} % of limit` : '');
      this.status.tooltip = `${this.result(p.job).text}\nClick to review the diff.`;
      this.status.command = { title: 'View Diff', command: 'warpforge.viewVariant', arguments: [p.job.id, p.candidate.candidate] };
      this.status.show();
    } else {
      this.status.hide();
    }
    this.changed.fire(job);
  }

  dispose(): void {
    for (const ui of this.progress.values()) {
      ui.close();
    }
    this.status.dispose();
    this.changed.dispose();
  }
}

export async function explainRestricted(what: string): Promise<void> {
  const choice = await vscode.window.showWarningMessage(
    `WarpForge: ${what} compiles this workspace's code and runs it on your GPU, so it is disabled in Restricted Mode. Static hints keep working. Trust the workspace to enable it.`,
    'Manage Workspace Trust',
  );
  if (choice) {
    await vscode.commands.executeCommand('workbench.trust.manage');
  }
}

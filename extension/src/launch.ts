// How the extension starts Python (the server and the interpreter probe): never from the workspace's
// folder and never with it on sys.path. `python -m` puts the working directory first on sys.path, so with
// the workspace as working directory a repository's numpy.py or json.py ran inside the server, also in
// Restricted Mode. The flags and variables live in launch.json, which the Python tests read too.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import spec from './launch.json';

export interface Launch {
  command: string;
  args: string[];
  options: { cwd: string; env: NodeJS.ProcessEnv };
}

/** The environment for any Python the extension runs: the caller's, plus the safe-path variables. */
export function pythonEnv(base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...base, ...spec.env };
}

/** Arguments of `python -c CODE` with the same flags as the server. */
export function probeArgs(code: string): string[] {
  return [...spec.pythonFlags, '-c', code];
}

function inside(dir: string, folder: string): boolean {
  const rel = path.relative(folder, dir);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** A working directory outside every workspace folder: the extension's storage folder, else the temp dir. */
export function neutralDir(storage: string | undefined, workspaceFolders: readonly string[]): string {
  for (const dir of [storage, os.tmpdir()]) {
    if (!dir || workspaceFolders.some((f) => inside(path.resolve(dir), path.resolve(f)))) {
      continue;
    }
    try {
      fs.mkdirSync(dir, { recursive: true });
      return dir;
    } catch {
      // not writable: try the next
    }
  }
  return path.parse(os.tmpdir()).root; // the filesystem root: never a repository
}

/** `python -P -m warpforge serve` in a neutral directory; the server learns the workspace from initialize. */
export function serverLaunch(python: string, cwd: string, base: NodeJS.ProcessEnv): Launch {
  return { command: python, args: [...spec.pythonFlags, ...spec.serverArgs], options: { cwd, env: pythonEnv(base) } };
}

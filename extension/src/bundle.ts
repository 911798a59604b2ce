// The server's Python libraries ride in the .vsix (bundled/, built by extension/bundle/bundle.py at package
// time), following the Python-tools extension template: the user's interpreter runs them through PYTHONPATH.
// This module finds the bundle, asks an interpreter what it is, and says plainly when it cannot be used.
// PYTHONPATH (rather than sys.path edits in a launcher script) because the server starts GPU workers as
// `python -m warpforge.gpu.worker`: they inherit the environment, not the parent's sys.path.
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import spec from './bundle.json';
import { pythonEnv } from './launch';

/** What bundle.py wrote into bundled/libs/warpforge_bundle.json. */
export interface Bundle {
  /** bundled/ in the installed extension */
  root: string;
  target: string;
  pythonVersions: string[];
  warpforge: string;
}

export const MIN_PYTHON = spec.pythonMin as [number, number];
export const PYCUDA_REQUIREMENT = spec.pycuda;
/** Installed with pycuda (not carried in the .vsix: only GPU work imports them), by their exact pins. */
export const GPU_PACKAGES: string[] = spec.gpuPackages;

/** The bundle of the installed extension; undefined in a development build that was never packaged. */
export function findBundle(extensionPath: string): Bundle | undefined {
  const root = path.join(extensionPath, 'bundled');
  try {
    const m = JSON.parse(fs.readFileSync(path.join(root, 'libs', 'warpforge_bundle.json'), 'utf8')) as Omit<Bundle, 'root'>;
    return { root, target: m.target, pythonVersions: m.pythonVersions, warpforge: m.warpforge };
  } catch {
    return undefined;
  }
}

export interface PythonInfo {
  python: string;
  version: [number, number, number];
  implementation: string;
}

export function versionText(info: PythonInfo): string {
  return info.version.join('.');
}

/** "cp311": the folder suffix of version-specific wheels (bundled/libs-cp311, the GPU libraries' folder). */
export function abiTag(info: PythonInfo): string {
  return `cp${info.version[0]}${info.version[1]}`;
}

/** Run the interpreter once, in the neutral directory, and read its version. `-I` (isolated: no script
 *  directory, working directory or user site on sys.path, no PYTHON* variables) rather than the server's
 *  `-P`: every Python 3 knows -I, while an interpreter older than 3.11 refuses -P, and it is exactly the
 *  one this probe must recognise to say so. */
export function probePython(python: string, cwd: string): Promise<PythonInfo | { problem: string }> {
  const code = 'import json, sys; print(json.dumps([list(sys.version_info[:3]), sys.implementation.name]))';
  return new Promise((resolve) => {
    execFile(python, ['-I', '-c', code], { timeout: 30_000, env: pythonEnv(process.env), cwd }, (err, stdout, stderr) => {
      if (err) {
        const code = (err as NodeJS.ErrnoException).code;
        resolve({
          problem: code === 'ENOENT'
            ? `the interpreter ${python} was not found`
            : `${python} did not run (${(stderr.trim().split('\n').pop() || err.message).trim()})`,
        });
        return;
      }
      try {
        const [version, implementation] = JSON.parse(stdout.trim().split('\n').pop() ?? '') as [number[], string];
        resolve({ python, version: [version[0], version[1], version[2]], implementation });
      } catch {
        resolve({ problem: `${python} is not a Python 3 interpreter (it printed: ${stdout.trim().slice(0, 80)})` });
      }
    });
  });
}

/** Why `info` cannot run the server (with the bundle when there is one), in words; undefined when it can. */
export function unusable(info: PythonInfo, bundle: Bundle | undefined): string | undefined {
  const [major, minor] = info.version;
  if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
    return `${info.python} is Python ${versionText(info)}, and WarpForge needs Python ${MIN_PYTHON.join('.')} or newer`;
  }
  if (!bundle) {
    return undefined;
  }
  if (info.implementation !== 'cpython') {
    return `${info.python} is ${info.implementation} ${versionText(info)}; the libraries in this extension are built for CPython`;
  }
  if (!bundle.pythonVersions.includes(`${major}.${minor}`)) {
    return `${info.python} is Python ${versionText(info)}; the libraries in this extension are built for Python ${bundle.pythonVersions.join(', ')}`;
  }
  return undefined;
}

/** The bundled folders for this interpreter, first on PYTHONPATH (the template's "useBundled"). */
export function bundlePaths(bundle: Bundle, info: PythonInfo): string[] {
  return [path.join(bundle.root, `libs-${abiTag(info)}`), path.join(bundle.root, 'libs')];
}

/** Where pycuda goes on first GPU use: the extension's global storage, one folder per CPython version
 *  (pycuda is compiled for it). Always on the server's PYTHONPATH, so a restart is all an install needs. */
export function gpuLibsDir(storage: string, info: PythonInfo): string {
  return path.join(storage, 'gpu-libs', abiTag(info));
}

/** PYTHONPATH for the server: `first` ahead of whatever the user's environment already had. */
export function joinPythonPath(first: string[], existing: string | undefined): string {
  return [...first, ...(existing ? [existing] : [])].join(path.delimiter);
}

import * as vscode from 'vscode';

/** An output channel that masks secrets (the API key) before writing: with "warpforge.trace.server":
 *  "verbose" the language client logs every message verbatim, initializationOptions and
 *  didChangeConfiguration (which carry the key) included. */
export class RedactingChannel implements vscode.OutputChannel {
  private readonly secrets = new Set<string>();

  constructor(private readonly inner: vscode.OutputChannel) {}

  get name(): string {
    return this.inner.name;
  }

  /** Mask `secret` from now on (ignored when too short to be a key). */
  addSecret(secret: string | undefined): void {
    if (secret && secret.length >= 8) {
      this.secrets.add(secret);
    }
  }

  private mask(value: string): string {
    let out = value;
    for (const s of this.secrets) {
      out = out.split(s).join('«redacted»');
    }
    return out;
  }

  append(value: string): void {
    this.inner.append(this.mask(value));
  }

  appendLine(value: string): void {
    this.inner.appendLine(this.mask(value));
  }

  replace(value: string): void {
    this.inner.replace(this.mask(value));
  }

  clear(): void {
    this.inner.clear();
  }

  show(columnOrPreserveFocus?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
    if (typeof columnOrPreserveFocus === 'boolean' || columnOrPreserveFocus === undefined) {
      this.inner.show(columnOrPreserveFocus);
    } else {
      this.inner.show(columnOrPreserveFocus, preserveFocus);
    }
  }

  hide(): void {
    this.inner.hide();
  }

  dispose(): void {
    // the inner channel belongs to the extension's subscriptions
  }
}

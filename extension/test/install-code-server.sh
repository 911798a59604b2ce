#!/usr/bin/env bash
# Install code-server 4.99.4 (VS Code 1.99.3, runs on Node 20) offline-from-internet, from the npm registry
# only, into DIR (default $HOME/.cache/warpforge-ci/code-server). Reused when DIR/.complete exists.
# The steps and why each is needed: ../shared/notes/vscode-ui-testing.md (postinstall scripts download
# from GitHub, so they are skipped and the native modules are rebuilt locally instead).
set -euo pipefail
VERSION=4.99.4
DIR=${1:-${WARPFORGE_CI_CACHE:-$HOME/.cache/warpforge-ci}/code-server}
if [[ -f "$DIR/.complete" && "$(cat "$DIR/.complete")" == "$VERSION" ]]; then
  echo "code-server $VERSION: reusing $DIR"
  exit 0
fi
rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR"
echo '{"name":"warpforge-ci-code-server","private":true}' > package.json
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
echo "code-server $VERSION: npm install (scripts off)"
npm install --no-save --ignore-scripts --loglevel=error "code-server@$VERSION"
echo "code-server: building argon2"
npm rebuild argon2 --loglevel=error
VS="$DIR/node_modules/code-server/lib/vscode"
cd "$VS"
echo "code-server: vscode dependencies"
npm install --omit=dev --ignore-scripts --loglevel=error
mkdir -p node_modules/@vscode/ripgrep/bin
cp "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
echo "code-server: native modules (node-gyp, offline against nodedir=/usr)"
npm_config_yes=true npm_config_nodedir=${npm_config_nodedir:-/usr} npm rebuild --loglevel=error
ln -sfn node_modules node_modules.asar
(cd bin/remote-cli && ln -sfn code-linux.sh code-server)
(cd bin/helpers && ln -sfn browser-linux.sh browser.sh)
(cd extensions && npm install --omit=dev --loglevel=error)
echo "$VERSION" > "$DIR/.complete"
echo "code-server $VERSION installed in $DIR"

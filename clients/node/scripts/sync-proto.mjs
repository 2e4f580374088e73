#!/usr/bin/env node
// Copies the repository's proto/agentry/v1/agentry.proto into this package (proto/agentry/v1/),
// so that the package carries the API it was built against.
//
//   node scripts/sync-proto.mjs           copy it (the `prepare` and `sync-proto` scripts)
//   node scripts/sync-proto.mjs --check   exit 1 when the package's copy differs (CI)
//
// Outside the repository (a packed or installed copy of the package) there is nothing to copy
// from: the copy is left alone, and only --check fails.
import { existsSync, readFileSync, mkdirSync, copyFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const FILE = path.join('agentry', 'v1', 'agentry.proto');
const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const source = path.resolve(pkg, '..', '..', 'proto', FILE);
const copy = path.join(pkg, 'proto', FILE);
const check = process.argv.includes('--check');

if (!existsSync(source)) {
  if (check) {
    console.error(`sync-proto: ${source} does not exist: not inside the agentry repository`);
    process.exit(1);
  }
  console.log(`sync-proto: no ${source}; keeping the package's copy`);
  process.exit(0);
}

const want = readFileSync(source);
const have = existsSync(copy) ? readFileSync(copy) : null;
if (have && want.equals(have)) {
  console.log(`sync-proto: ${path.relative(pkg, copy)} is up to date`);
} else if (check) {
  console.error(
    `sync-proto: ${path.relative(pkg, copy)} ${have ? 'differs from' : 'is missing; expected a copy of'} ${source}\n` +
      '  run `npm run sync-proto` in clients/node and commit the copy',
  );
  process.exit(1);
} else {
  mkdirSync(path.dirname(copy), { recursive: true });
  copyFileSync(source, copy);
  console.log(`sync-proto: copied ${source} to ${path.relative(pkg, copy)}`);
}

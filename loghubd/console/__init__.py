"""The web console: one look, one set of building blocks, two mounts.

- `loghubd serve` mounts it at `/console` on hosts that name no project (`serve_app`):
  projects, logstores and shards, consumer groups, and a live tail with an SPL filter.
- `loghubd run` mounts it at `/` of the ops listener (`daemon_app`): sources, shards,
  throughput and lag over the last minutes, last errors, readiness in words.

Pages are rendered on the server (`html`, `serve_pages`, `daemon_pages`) and read fine with
JavaScript off; `static/console.js` (plain JS, no build step, no CDN) only refreshes the
regions marked `data-live` in place, so pages update without a reload. Access (`access`):
sign-in with an access key pair or a console token, and only what the key's policy allows.
"""

// Package dashboard serves Flotilla's web dashboard: the fleet, each bundle's rollout lane by
// lane (partitions, stages, sequence groups) with every cluster's chip, why a lane waits and
// when it moves on, how a revision ended, a cluster's deployments and events, and what a
// revision changes; and the actions a person takes on a rollout, through hub/operate.
//
// Nothing here has an identity of its own. Every read and every action is the viewer's: in
// local mode (`flotilla dashboard`) with the person's kubeconfig, behind a login link only they
// hold; in proxy mode (in the cluster) by impersonating the user an authenticating proxy
// asserts, trusted only with the proxy's client certificate. What the viewer's RBAC forbids,
// the page does not show or refuses with the API server's reason.
//
//	browser ── GET /api/stream (server-sent events) ──▶ viewer (identity, namespace)
//	        ◀── the view, pushed when it changed ────── informers as that identity
//	        ── POST /api/action (CSRF token) ─────────▶ hub/operate as that identity
//
// A viewer's informers are shared by the identity's open pages and stopped after the last one
// closes. Pushes are coalesced per page (Options.PushInterval) and sent only when the view
// changed. Lanes are drawn with the planner's own partitioning (rollout.AssignPartitions),
// the hub's state function and the reasons `flotilla status` prints (hub/report); lanes at
// fleet scale are counts and the clusters that need attention, and the cluster table pages.
//
// The page is plain JavaScript and CSS embedded in the binary (assets/); it renders every
// value as text, never as markup, under a content policy that runs no inline script.
package dashboard

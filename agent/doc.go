// Package agent is the small program that runs in each downstream cluster: it pulls its own
// BundleDeployments from the hub, applies them with server-side apply, and reports readiness and
// drift back. It must stay small: it imports the hub's API types, never Helm, Kustomize or
// go-git (rendering happens on the hub), nor client-go's clientsets and discovery or
// controller-runtime's client and manager, which register every Kubernetes kind when a process
// starts (package kube has the agent's own clients); e2e/archtest enforces this.
//
// The deployment engine:
//
//	a := agent.NewApplier(cfg)                      // dynamic client + kube.Mapper (discovery)
//	res, err := a.Apply(ctx, objects, inventory, opts)
//	// res.Inventory: what is deployed now (namespace_name_group_kind ids), to keep for the next
//	// apply; objects of the old inventory that left the bundle were pruned (unless
//	// KeepResources).
//	health := a.Health(ctx, res.Inventory, opts)     // kstatus readiness, ignore.conditions
//	drift := a.Drift(ctx, objects, opts)             // dry-run apply vs live, comparePatches
//
// Everything is applied under one field manager, "flotilla-agent", with conflicts forced: the
// bundle is the source of truth for the fields it sets. Ownership is explicit: every object
// carries its deployment's mark (opts.Owner, in the flotilla.dev/owned-by annotation); an
// object that exists and is not the deployment's is left alone unless opts.TakeOwnership, and
// prune deletes only what carries the mark, never a protected namespace. A deployment's
// FleetRestrictions and forced namespace are checked before anything is applied (admissible),
// and a restricted deployment applies as the service account its restriction names
// (impersonation), so downstream RBAC bounds it too.
//
// The deployer reconciles its cluster's BundleDeployments in a loop of the hub's controllers'
// shape (loop.go, on client-go's informer and work queue): it applies, observes and sets the
// status of a copy; the loop writes the status when it changed, conditional on the copy, and
// calls gone for a deployment the hub removed. A content is read from the hub once
// (content.Cache): the resyncs that check readiness and drift ask the hub for nothing, so an
// idle agent's only requests are its Lease renewals.
//
// On the hub the agent is its cluster's ServiceAccount and nothing more (README, security
// model). It renews its own token before it expires (credentials.go), follows its cluster when
// the hub moves it to a new namespace, and stops with ErrRemoved when the hub revoked it: a
// deployment that disappears from the hub is uninstalled only while the cluster is still a
// member.
package agent

package notify

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// commitStatusDelay coalesces a GitRepo's bundles' changes: a rollout's progress is posted at
// most this often per GitRepo, its state changes as soon as that allows.
const commitStatusDelay = 2 * time.Second

// CommitStatusReconciler posts the commit statuses a GitRepo asks for (spec.commitStatus) to
// its forge, from its Bundles as the cache has them. It posts a status only when it differs
// from the one it posted last, and writes nothing in the hub but its provider's Ready
// condition when that changes.
type CommitStatusReconciler struct {
	Client client.Client
	Dir    Directory
	// DashboardURL, when set, is where the statuses link to.
	DashboardURL string

	mu     sync.Mutex
	posted map[postKey]CommitStatus
}

type postKey struct {
	repo         types.NamespacedName
	context, sha string
}

// Setup registers the commit-status controller: GitRepos, woken by their Bundles.
func (r *CommitStatusReconciler) Setup(mgr ctrl.Manager) error {
	toRepo := model.Coalesced(commitStatusDelay, model.GitRepoOfBundle, nil)
	return ctrl.NewControllerManagedBy(mgr).Named("commit-status").
		For(&v1alpha1.GitRepo{}).
		Watches(&v1alpha1.Bundle{}, toRepo).
		Complete(r)
}

// Reconcile posts what changed of the GitRepo's commit statuses.
func (r *CommitStatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var repo v1alpha1.GitRepo
	if err := r.Client.Get(ctx, req.NamespacedName, &repo); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	cs := repo.Spec.CommitStatus
	if cs == nil {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	var bundles v1alpha1.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{model.LabelGitRepo: repo.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list the bundles of %s: %w", repo.Name, err)
	}
	statuses := CommitStatuses(&repo, bundles.Items)
	var due []CommitStatus
	r.mu.Lock()
	for _, s := range statuses {
		if r.posted[postKey{req.NamespacedName, s.Context, s.SHA}] != s {
			due = append(due, s)
		}
	}
	r.mu.Unlock()
	if len(due) == 0 {
		return ctrl.Result{}, nil
	}
	logger := log.FromContext(ctx).WithValues("gitrepo", req.String())
	ep, err := r.Dir.Provider(ctx, repo.Namespace, cs.ProviderRef.Name)
	if err == nil && !ep.Type.Forge() {
		err = fmt.Errorf("NotificationProvider %s is of type %s: commit statuses go to github, gitlab, gitea or bitbucket", cs.ProviderRef.Name, ep.Type)
	}
	path := cs.Repository
	if err == nil && path == "" {
		path, err = RepositoryPath(repo.Spec.Repo)
	}
	if err != nil {
		logger.Info("commit statuses not posted", "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	if ep.Suspend {
		return ctrl.Result{}, nil
	}
	link := ""
	if r.DashboardURL != "" {
		link = strings.TrimSuffix(r.DashboardURL, "/") + "/#/" + repo.Namespace
	}
	for _, s := range due {
		if err := PostCommitStatus(ctx, ep, path, s, link); err != nil {
			metrics.Notifications.WithLabelValues(string(ep.Type), "failed").Inc()
			r.Dir.ReportProvider(ctx, repo.Namespace, cs.ProviderRef.Name, err)
			logger.Info("commit status not posted", "commit", s.SHA, "context", s.Context, "state", s.State, "error", err.Error())
			return ctrl.Result{}, err // the workqueue retries with backoff
		}
		metrics.Notifications.WithLabelValues(string(ep.Type), "delivered").Inc()
		r.mu.Lock()
		if r.posted == nil {
			r.posted = map[postKey]CommitStatus{}
		}
		for k := range r.posted {
			if k.repo == req.NamespacedName && k.context == s.Context {
				delete(r.posted, k) // an older commit's: its status is final on the forge
			}
		}
		r.posted[postKey{req.NamespacedName, s.Context, s.SHA}] = s
		r.mu.Unlock()
	}
	r.Dir.ReportProvider(ctx, repo.Namespace, cs.ProviderRef.Name, nil)
	return ctrl.Result{}, nil
}

// forget drops what was posted for a GitRepo that is gone or asks for no statuses.
func (r *CommitStatusReconciler) forget(repo types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.posted {
		if k.repo == repo {
			delete(r.posted, k)
		}
	}
}

package dashboard

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/report"
)

// watchedKind is a kind a viewer keeps in its caches.
type watchedKind struct {
	resource string
	obj      client.Object
	list     func() client.ObjectList
	// fleetWide: a kind living in the clusters' namespaces, selected by the fleet namespace's label.
	fleetWide bool
}

var watchedKinds = []watchedKind{
	{"gitrepos", &v1alpha1.GitRepo{}, func() client.ObjectList { return &v1alpha1.GitRepoList{} }, false},
	{"bundles", &v1alpha1.Bundle{}, func() client.ObjectList { return &v1alpha1.BundleList{} }, false},
	{"bundledeployments", &v1alpha1.BundleDeployment{}, func() client.ObjectList { return &v1alpha1.BundleDeploymentList{} }, true},
	{"clusters", &v1alpha1.Cluster{}, func() client.ObjectList { return &v1alpha1.ClusterList{} }, false},
	{"clustergroups", &v1alpha1.ClusterGroup{}, func() client.ObjectList { return &v1alpha1.ClusterGroupList{} }, false},
	{"stagedupdateruns", &v1alpha1.StagedUpdateRun{}, func() client.ObjectList { return &v1alpha1.StagedUpdateRunList{} }, false},
	{"approvalrequests", &v1alpha1.ApprovalRequest{}, func() client.ObjectList { return &v1alpha1.ApprovalRequestList{} }, false},
	{"rolloutsequences", &v1alpha1.RolloutSequence{}, func() client.ObjectList { return &v1alpha1.RolloutSequenceList{} }, false},
	{"events", &eventsv1.Event{}, func() client.ObjectList { return &eventsv1.EventList{} }, false},
}

// viewer is one identity's window on one fleet namespace: informers that list and watch under
// that identity (so a page shows what its RBAC shows and nothing more), shared by every page
// the identity has open there, stopped a while after the last one closes. Kinds the identity
// may not list are not watched; the API server's answer is kept to show instead.
type viewer struct {
	id        Identity
	namespace string
	direct    client.Client // uncached, as the identity: reads outside the caches, and actions
	cache     cache.Cache
	refused   map[string]error // resource → the API server's refusal
	stop      context.CancelFunc

	mu       sync.Mutex
	subs     map[chan struct{}]struct{}
	refs     int
	idle     *time.Timer
	watchErr error // the last watch error, cleared by the next event

	// hubVersion is the hub's recorded version as read at versionRead: an uncached list, so
	// read once a minute rather than at every push.
	hubVersion  string
	versionRead time.Time
}

// versionTTL is how long a viewer keeps the hub's version before reading it again.
const versionTTL = time.Minute

// hubVersionAt returns the hub's recorded version, read again when older than versionTTL.
func (v *viewer) hubVersionAt(ctx context.Context, now time.Time) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.versionRead.IsZero() || now.Sub(v.versionRead) >= versionTTL {
		v.hubVersion, v.versionRead = report.HubVersion(ctx, v.direct), now
	}
	return v.hubVersion
}

// resourceOf names the watched kind of an object or list ("" for any other).
var resourceOf = func() map[reflect.Type]string {
	m := map[reflect.Type]string{}
	for _, k := range watchedKinds {
		m[reflect.TypeOf(k.obj)] = k.resource
		m[reflect.TypeOf(k.list())] = k.resource
	}
	return m
}()

// List reads a watched kind from the caches, or returns the API server's refusal of it.
func (v *viewer) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := v.refused[resourceOf[reflect.TypeOf(list)]]; err != nil {
		return err
	}
	switch list.(type) {
	case *v1alpha1.BundleDeploymentList, *v1alpha1.ClusterList:
		// A fleet's thousands of these are read at every push, and views only read them:
		// shared with the cache rather than copied.
		opts = append(opts, client.UnsafeDisableDeepCopy)
	}
	return v.cache.List(ctx, list, opts...)
}

// Get reads a watched kind from the caches, or returns the API server's refusal of it.
func (v *viewer) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := v.refused[resourceOf[reflect.TypeOf(obj)]]; err != nil {
		return err
	}
	return v.cache.Get(ctx, key, obj, opts...)
}

// subscribe returns a channel that receives a value (coalesced: it holds at most one) whenever
// a watched object changes.
func (v *viewer) subscribe() chan struct{} {
	ch := make(chan struct{}, 1)
	v.mu.Lock()
	v.subs[ch] = struct{}{}
	v.mu.Unlock()
	return ch
}

func (v *viewer) unsubscribe(ch chan struct{}) {
	v.mu.Lock()
	delete(v.subs, ch)
	v.mu.Unlock()
}

// seen is an event of a watch: the watches work (again).
func (v *viewer) seen() {
	v.mu.Lock()
	v.watchErr = nil
	v.mu.Unlock()
	v.changed()
}

func (v *viewer) changed() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for ch := range v.subs {
		select {
		case ch <- struct{}{}:
		default: // one pending change is as good as many
		}
	}
}

// viewers are the open viewers, by identity and namespace.
type viewers struct {
	scheme *runtime.Scheme
	config func(Identity) *rest.Config
	// linger keeps a viewer's caches a while after its last page closed: a reload or a dropped
	// connection comes back to warm caches.
	linger time.Duration

	mu   sync.Mutex
	open map[string]*viewer
	// starting are viewers being started, so that concurrent pages share one start.
	starting map[string]chan struct{}
}

// acquire returns the identity's viewer of namespace, started and synced, and a release that
// the caller calls when its page is done with it.
func (vs *viewers) acquire(ctx context.Context, id Identity, namespace string) (*viewer, func(), error) {
	key := id.key() + "\x00" + namespace
	for {
		vs.mu.Lock()
		if v := vs.open[key]; v != nil {
			v.mu.Lock()
			v.refs++
			if v.idle != nil {
				v.idle.Stop()
				v.idle = nil
			}
			v.mu.Unlock()
			vs.mu.Unlock()
			return v, func() { vs.release(key, v) }, nil
		}
		if wait, ok := vs.starting[key]; ok {
			vs.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		vs.starting[key] = done
		vs.mu.Unlock()
		v, err := vs.start(ctx, id, namespace)
		vs.mu.Lock()
		delete(vs.starting, key)
		if err == nil {
			vs.open[key] = v
		}
		close(done)
		vs.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
	}
}

func (vs *viewers) release(key string, v *viewer) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.refs--
	if v.refs > 0 {
		return
	}
	v.idle = time.AfterFunc(vs.linger, func() {
		vs.mu.Lock()
		v.mu.Lock()
		idle := v.refs == 0
		if idle && vs.open[key] == v {
			delete(vs.open, key)
		}
		v.mu.Unlock()
		vs.mu.Unlock()
		if idle {
			v.stop()
		}
	})
}

// closeAll stops every viewer.
func (vs *viewers) closeAll() {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for key, v := range vs.open {
		v.stop()
		delete(vs.open, key)
	}
}

// start asks the API server, as the identity, which kinds it may list, and watches those.
func (vs *viewers) start(ctx context.Context, id Identity, namespace string) (*viewer, error) {
	cfg := vs.config(id)
	direct, err := client.New(cfg, client.Options{Scheme: vs.scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to connect to the hub: %w", err)
	}
	v := &viewer{id: id, namespace: namespace, direct: direct, refused: map[string]error{}, subs: map[chan struct{}]struct{}{}, refs: 1}
	ofFleet := labels.SelectorFromSet(labels.Set{model.LabelBundleNamespace: namespace})
	byObject := map[client.Object]cache.ByObject{}
	for _, k := range watchedKinds {
		opts := []client.ListOption{client.Limit(1)}
		if k.fleetWide {
			opts = append(opts, client.MatchingLabelsSelector{Selector: ofFleet})
		} else {
			opts = append(opts, client.InNamespace(namespace))
		}
		if err := direct.List(ctx, k.list(), opts...); err != nil {
			if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("failed to list %s: %w", k.resource, err)
			}
			v.refused[k.resource] = err
			continue
		}
		if k.fleetWide {
			byObject[k.obj] = cache.ByObject{Namespaces: map[string]cache.Config{cache.AllNamespaces: {LabelSelector: ofFleet}}}
		} else {
			byObject[k.obj] = cache.ByObject{}
		}
	}
	if err := v.refused["gitrepos"]; err != nil && apierrors.IsUnauthorized(err) {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{
		Scheme:                      vs.scheme,
		DefaultNamespaces:           map[string]cache.Config{namespace: {}},
		ByObject:                    byObject,
		ReaderFailOnMissingInformer: true,
		DefaultTransform:            cache.TransformStripManagedFields(),
		DefaultWatchErrorHandler: func(_ context.Context, _ *toolscache.Reflector, err error) {
			v.mu.Lock()
			v.watchErr = err
			v.mu.Unlock()
			v.changed()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to start the caches: %w", err)
	}
	v.cache = c
	runCtx, stop := context.WithCancel(context.Background())
	handler := toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(any, bool) { v.seen() },
		UpdateFunc: func(any, any) { v.seen() },
		DeleteFunc: func(any) { v.seen() },
	}
	for obj := range byObject {
		inf, err := c.GetInformer(runCtx, obj)
		if err != nil {
			stop()
			return nil, fmt.Errorf("failed to watch %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			stop()
			return nil, err
		}
	}
	started := make(chan struct{})
	go func() { defer close(started); _ = c.Start(runCtx) }()
	// Stopping returns once the informers did: their caches are the viewer's memory.
	v.stop = func() { stop(); <-started }
	if !c.WaitForCacheSync(ctx) {
		v.stop()
		return nil, errors.Join(ctx.Err(), errors.New("the caches did not sync"))
	}
	return v, nil
}

// watchProblem is the last error of a watch (the identity lost access, the hub went away),
// shown on the page: what it shows may be stale.
func (v *viewer) watchProblem() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.watchErr; err != nil {
		return err.Error()
	}
	return ""
}

// Command flotilla-agent runs in a downstream cluster: it applies the cluster's
// BundleDeployments from the hub and reports their state. It parses flags into
// agent.RunOptions and calls agent.Run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/cmd/internal/version"
)

// gcPercent is the agent's GOGC unless the environment sets one. An agent idles most of the
// time over a small heap: collecting when it has grown by half rather than doubled keeps its
// resident memory down for a few milliseconds of CPU a minute.
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	var opts agent.RunOptions
	var hubKubeconfig, bootstrapSecret string
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.StringVar(&bootstrapSecret, "bootstrap-secret", "flotilla-agent-bootstrap", "local Secret (in --state-namespace) to register with on first start; the granted credentials are kept in flotilla-agent-hub")
	flag.StringVar(&hubKubeconfig, "hub-kubeconfig", "", "instead of registering: kubeconfig with this cluster's credentials on the hub (needs --namespace, --cluster-name, --cluster-namespace)")
	flag.StringVar(&opts.Namespace, "namespace", "", "with --hub-kubeconfig: the cluster's namespace on the hub (its BundleDeployments)")
	flag.StringVar(&opts.ClusterName, "cluster-name", "", "with --hub-kubeconfig: the cluster's Cluster object on the hub")
	flag.StringVar(&opts.ClusterNamespace, "cluster-namespace", "", "with --hub-kubeconfig: the namespace of the Cluster object on the hub")
	flag.StringVar(&opts.StateNamespace, "state-namespace", "flotilla-system", "local namespace for inventories")
	flag.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", 0, "time between heartbeats; default the interval the hub asks for")
	flag.DurationVar(&opts.ResyncInterval, "resync-interval", 30*time.Second, "time between readiness and drift checks")
	flag.StringVar(&opts.MetricsAddr, "metrics-addr", "0", "address of the Prometheus metrics endpoint (e.g. :8081); 0 disables it")
	flag.DurationVar(&opts.NotReadyWarning, "not-ready-warning", agent.DefaultNotReadyWarning, "how long an applied revision may stay not ready before the agent records a RevisionNotReady Warning on its deployment")
	flag.Func("events", "Events recorded on the cluster's deployments on the hub: warnings (what failed or was undone; default) or all (also each revision applied and ready: two API writes per deployment and revision)", func(v string) error {
		level, err := agent.ParseEventLevel(v)
		opts.Events = level
		return err
	})
	flag.Func("protected-namespaces", "comma-separated namespaces no bundle may delete, beside default, kube-* and --state-namespace", func(v string) error {
		opts.ProtectedNamespaces = append(opts.ProtectedNamespaces, strings.Split(v, ",")...)
		return nil
	})
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse() // also reads --kubeconfig (the local cluster), registered by controller-runtime's config
	if *showVersion {
		fmt.Println(version.String("flotilla-agent"))
		return
	}
	log.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	opts.Version = version.Version()
	fail := func(code int, err error) {
		fmt.Fprintln(os.Stderr, "flotilla-agent:", err)
		os.Exit(code)
	}
	var err error
	if opts.LocalConfig, err = config.GetConfig(); err != nil {
		fail(2, err)
	}
	ctx := signals.SetupSignalHandler()
	if hubKubeconfig != "" {
		if opts.Namespace == "" || opts.ClusterName == "" || opts.ClusterNamespace == "" {
			fail(2, fmt.Errorf("--hub-kubeconfig needs --namespace, --cluster-name and --cluster-namespace"))
		}
		if opts.HubConfig, err = clientcmd.BuildConfigFromFlags("", hubKubeconfig); err != nil {
			fail(2, fmt.Errorf("hub kubeconfig: %w", err))
		}
		if err := agent.Run(ctx, opts); err != nil {
			fail(1, err)
		}
		return
	}
	local, err := kube.NewLocal(opts.LocalConfig)
	if err != nil {
		fail(2, err)
	}
	logger := log.Log.WithName("agent")
	boot := agent.BootstrapOptions{Namespace: opts.StateNamespace, BootstrapSecret: bootstrapSecret,
		Waiting: func(reason, msg string) {
			logger.Info("the hub holds the registration", "reason", reason, "message", msg)
		}}
	opts.OnCredentials = boot.Keep(local)
	for {
		reg, err := agent.Bootstrap(ctx, local, boot)
		if errors.Is(err, agent.ErrRemoved) {
			idle(ctx, logger, err)
			return
		}
		if err != nil {
			fail(1, err)
		}
		opts.HubConfig, opts.Namespace, opts.ClusterName, opts.ClusterNamespace = reg.HubConfig, reg.Namespace, reg.ClusterName, reg.ClusterNamespace
		err = agent.Run(ctx, opts)
		switch {
		case errors.Is(err, agent.ErrCredentialsExpired):
			logger.Info("the hub credentials expired: registering again")
			continue
		case errors.Is(err, agent.ErrRemoved):
			if err := boot.MarkRemoved(ctx, local, err); err != nil {
				logger.Error(err, "failed to record the removal")
			}
			idle(ctx, logger, err)
			return
		case err != nil:
			fail(1, err)
		}
		return
	}
}

// idle reports a removed cluster and waits for the end: restarting would only find the same
// revoked credentials again.
func idle(ctx context.Context, logger logr.Logger, err error) {
	logger.Error(err, "the agent stays idle until its credentials secret is deleted and it is restarted")
	<-ctx.Done()
}

// Command flotilla-hub runs the Flotilla hub: it follows GitRepos, renders their bundles and
// rolls them out to the registered clusters. It parses flags into hub.Options (hub.BindFlags)
// and calls hub.Run. `flotilla-hub dashboard` serves the web dashboard instead, as the hub
// chart runs it behind an authenticating proxy (dashboard.enabled).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/cmd/internal/dashboardcmd"
	"github.com/flotilla-dev/flotilla/cmd/internal/version"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "dashboard" {
		os.Exit(dashboard(os.Args[2:]))
	}
	flags := hub.BindFlags(flag.CommandLine, os.Getenv)
	showVersion := flag.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse() // also reads --kubeconfig, registered by controller-runtime
	if *showVersion {
		fmt.Println(version.String("flotilla-hub"))
		return
	}
	opts, err := flags.Options()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub:", err)
		os.Exit(2)
	}
	opts.Version = version.Version()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub:", err)
		os.Exit(2)
	}
	opts.Config = cfg
	err = hub.Run(ctrl.SetupSignalHandler(), opts)
	var lost *hub.LeaseLostError
	if errors.As(err, &lost) {
		// As a kubelet would restart it, without its back-off and without a new identity.
		fmt.Fprintf(os.Stderr, "flotilla-hub: %v; stepping back into the election as %s\n", err, lost.Identity)
		err = hub.StepBackIn(lost.Identity, os.Args, os.Environ())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub:", err)
		os.Exit(1)
	}
}

// dashboard serves the dashboard with the pod's service account, which may only impersonate:
// every request acts as the user the proxy asserts.
func dashboard(args []string) int {
	fs := flag.NewFlagSet("flotilla-hub dashboard", flag.ContinueOnError)
	var o dashboardcmd.Options
	o.Bind(fs, ":8443")
	namespace := fs.String("namespace", "fleet-default", "the fleet namespace a page opens on")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the hub's API server (default: in-cluster)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub dashboard:", err)
		return 2
	}
	if err := o.Run(ctrl.SetupSignalHandler(), os.Stdout, cfg, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub dashboard:", err)
		var input *operate.ErrInput
		if errors.As(err, &input) {
			return 2
		}
		return 1
	}
	return 0
}

// Command flotilla-hub runs the Flotilla hub: it follows GitRepos, renders their bundles and
// rolls them out to the registered clusters. It parses flags into hub.Options (hub.BindFlags)
// and calls hub.Run.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/cmd/internal/version"
	"github.com/flotilla-dev/flotilla/hub"
)

func main() {
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
	if err := hub.Run(ctrl.SetupSignalHandler(), opts); err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub:", err)
		os.Exit(1)
	}
}

// The PyTorchJob controller of the Kubeflow training operator (github.com/kubeflow/training-operator),
// built by hack/training-operator.sh for hybridgpu's e2e tests.
//
// The upstream main (cmd/training-operator.v1) cannot run outside a cluster: it waits, before
// it starts any controller, for its certificate rotator to find certificates mounted at a fixed
// path and to inject a CA into its webhook configuration, and its webhook server listens on
// every interface. This main starts the same PyTorchJob reconciler (pkg/controller.v1/pytorch)
// with the same defaults and no webhooks, so no server listens at all (metrics and health
// probes off too), as the JobSet, KubeRay and Kueue controllers run in the tests.
package main

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
	pytorchcontroller "github.com/kubeflow/training-operator/pkg/controller.v1/pytorch"
)

func main() {
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	// The upstream flags' defaults (cmd/training-operator.v1/main.go).
	config.Config.PyTorchInitContainerImage = config.PyTorchInitContainerImageDefault
	config.Config.PyTorchInitContainerTemplateFile = config.PyTorchInitContainerTemplateFileDefault
	config.Config.PyTorchInitContainerMaxTries = config.PyTorchInitContainerMaxTriesDefault

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubeflowv1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		log.Error(err, "unable to create the manager")
		os.Exit(1)
	}
	reconciler := pytorchcontroller.NewReconciler(mgr, common.GenNonGangSchedulerSetupFunc())
	if err := reconciler.SetupWithManager(mgr, 1); err != nil {
		log.Error(err, "unable to set up the PyTorchJob controller")
		os.Exit(1)
	}
	log.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "the manager stopped")
		os.Exit(1)
	}
}

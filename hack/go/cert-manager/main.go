// Command cert-manager runs cert-manager's controller or its CA injector (cainjector) for the
// local cluster of `hack/local-cluster.sh up DIR --with cert-manager` (hack/cert_manager.py).
//
// The Go module proxy serves github.com/cert-manager/cert-manager (v1.21.x) without its cmd/
// directory (cmd/controller and cmd/cainjector are separate modules, named
// .../controller-binary and .../cainjector-binary, that are never published), so this small
// program wires cert-manager's own packages together: the controllers that issue a certificate
// from a selfSigned or a CA Issuer (pkg/controller/..., registered by their init functions, with
// cert-manager's default options), and the injectors of pkg/controller/cainjector on a
// controller-runtime manager. No webhook, no ACME, Vault or Venafi issuers, no leader election
// (one replica), no metrics or health servers.
//
//	cert-manager controller --kubeconfig FILE [--cluster-resource-namespace NS] [--v N]
//	cert-manager cainjector --kubeconfig FILE [--v N]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1 "k8s.io/api/core/v1"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "controller" && os.Args[1] != "cainjector") {
		fmt.Fprintln(os.Stderr, "usage: cert-manager controller|cainjector --kubeconfig FILE [flags]")
		os.Exit(2)
	}
	component := os.Args[1]
	flags := flag.NewFlagSet(component, flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "the kubeconfig of the identity to run as")
	clusterResourceNamespace := flags.String("cluster-resource-namespace", "kube-system",
		"where a ClusterIssuer's Secrets are read (cert-manager's default)")
	workers := flags.Int("concurrent-workers", 5, "workers per controller (cert-manager's default)")
	klog.InitFlags(flags)
	_ = flags.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), component)
	var err error
	if component == "controller" {
		err = runController(ctx, *kubeconfig, *clusterResourceNamespace, *workers)
	} else {
		err = runCAInjector(ctx, *kubeconfig)
	}
	klog.Flush()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", component, err)
		os.Exit(1)
	}
}

// runController starts every controller registered above with cert-manager's default options
// (QPS 20, burst 50, certificate request backoff 1 h to 32 h) until ctx ends.
func runController(ctx context.Context, kubeconfig, clusterResourceNamespace string, workers int) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(controller.Known()))
	for name := range controller.Known() {
		names = append(names, name)
	}
	sort.Strings(names)
	klog.InfoS("starting cert-manager controllers", "controllers", strings.Join(names, ","))
	group, ctx := errgroup.WithContext(ctx)
	for _, name := range names {
		loop, err := controller.Known()[name](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		group.Go(func() error { return loop.Run(workers, ctx) })
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	return group.Wait()
}

// runCAInjector injects the CA of a Certificate's Secret into the webhook configurations,
// APIServices and CRDs that ask for it (cert-manager.io/inject-ca-from), as cainjector does.
func runCAInjector(ctx context.Context, kubeconfig string) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")
	ctrl.SetLogger(klog.Background())
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:  scheme,
		Cache:   cache.Options{ReaderFailOnMissingInformer: true},
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/internal/cli/labca"
)

func init() { register("tls", newTLSCmd) }

func newTLSCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls init",
		Short: "Make a self-signed lab CA and the coordinator's TLS certificate",
		Long: `tls manages the certificates of a lab farm that has no CA of its own.
See docs/security.md for the whole walkthrough.`,
	}
	cmd.AddCommand(newTLSInitCmd(env))
	return cmd
}

func newTLSInitCmd(env *Env) *cobra.Command {
	var (
		dir        string
		hosts      string
		serverDays int
		caDays     int
	)
	cmd := &cobra.Command{
		Use:   "init --dir DIR --host HOST[,HOST...]",
		Short: "Make (or reuse) a lab CA in DIR and issue a server certificate for the given hosts",
		Long: `init writes a self-signed lab certificate authority and a server
certificate it signs for the coordinator, with every --host (DNS names and
IP addresses that agents and CLIs use to reach it) as a subject alternative
name:

  DIR/ca.pem          the CA certificate: copy it to every agent and CLI
  DIR/ca-key.pem      the CA key (0600): keep it here to issue new certificates
  DIR/server.pem      lesfarm serve --tls-cert
  DIR/server-key.pem  lesfarm serve --tls-key (0600)

An existing CA in DIR is reused, so running init again (a host added, or
the server certificate about to expire) keeps every agent's ca.pem valid.
The server certificate serves both the HTTPS API and the embedded NATS
listener.`,
		Example: `  lesfarm tls init --dir /etc/lesfarm/tls --host farm.lab,192.168.1.10,localhost,127.0.0.1
  lesfarm serve --tls-cert /etc/lesfarm/tls/server.pem --tls-key /etc/lesfarm/tls/server-key.pem \
      --http-addr 0.0.0.0:8443 --nats-listen 0.0.0.0:4222
  lesfarm agent --nats-url nats://farm.lab:4222 --ca ca.pem --name pixel-8-a --device-token-file secret
  lesfarm run --server https://farm.lab:8443 --ca ca.pem --suite smoke --build b1 --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("tls init: --dir is required: the directory for ca.pem, server.pem and their keys")
			}
			if hosts == "" {
				return usagef("tls init: --host is required: the names and addresses agents reach the coordinator by, e.g. farm.lab,192.168.1.10")
			}
			if serverDays < 1 || caDays < 1 {
				return usagef("tls init: --days and --ca-days must be at least 1")
			}
			res, err := labca.Init(dir, strings.Split(hosts, ","), labca.Options{
				ServerValidity: time.Duration(serverDays) * 24 * time.Hour,
				CAValidity:     time.Duration(caDays) * 24 * time.Hour,
			})
			if err != nil {
				if errors.Is(err, labca.ErrBadHost) {
					return usagef("tls init: %v", err)
				}
				return fmt.Errorf("tls init: %w", err)
			}
			ca := "reused the CA in"
			if res.NewCA {
				ca = "made a new CA in"
			}
			var names []string
			names = append(names, res.DNSNames...)
			for _, ip := range res.IPs {
				names = append(names, ip.String())
			}
			fmt.Fprintf(env.Stdout, "%s %s (sha256 %s)\nserver certificate for %s, valid until %s\n"+
				"  serve:  --tls-cert %s --tls-key %s\n  agents and CLI: --ca %s (or LESFARM_CA)\n",
				ca, dir, res.CAFingerprint, strings.Join(names, ", "), res.NotAfter.Format(time.DateOnly),
				filepath.Join(dir, labca.ServerFile), filepath.Join(dir, labca.ServerKeyFile),
				filepath.Join(dir, labca.CAFile))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory of the CA and server certificate files (created 0700)")
	f.StringVar(&hosts, "host", "", "comma-separated DNS names and IP addresses of the coordinator")
	f.IntVar(&serverDays, "days", 825, "validity of the server certificate in days")
	f.IntVar(&caDays, "ca-days", 3650, "validity of a new CA in days (an existing CA is reused as it is)")
	return cmd
}

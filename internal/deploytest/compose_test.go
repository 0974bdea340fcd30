// Package deploytest checks the deployment files the repository ships
// (docker-compose.yml), which the compose CLI cannot run here.
package deploytest

import (
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lesfarm/lesfarm/internal/cli"
)

type service struct {
	Image   string   `yaml:"image"`
	Build   any      `yaml:"build"`
	Command []string `yaml:"command"`
	Ports   []string `yaml:"ports"`
}

// flag returns the value of --name=value or --name value in args.
func flag(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// parses checks that args are valid flags of the lesfarm subcommand.
func parses(t *testing.T, args []string) {
	t.Helper()
	root := cli.NewRoot(&cli.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("lesfarm %v: %v", args, err)
	}
}

// TestComposeShape: docker-compose.yml runs a three-node NATS cluster with
// JetStream (each node routing to the two others), two coordinators that
// know every node and keep the streams at R3, on one database, and agents
// that can fail over to any node; every lesfarm command line parses.
func TestComposeShape(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]service `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var nats, coords, agents []string
	for name, s := range f.Services {
		switch {
		case strings.HasPrefix(s.Image, "nats:"):
			nats = append(nats, name)
		case s.Build != nil && len(s.Command) > 0 && s.Command[0] == "serve":
			coords = append(coords, name)
		case s.Build != nil && len(s.Command) > 0 && s.Command[0] == "agent":
			agents = append(agents, name)
		}
	}
	sort.Strings(nats)
	if len(nats) != 3 || len(coords) != 2 || len(agents) == 0 {
		t.Fatalf("services: nats %v, coordinators %v, agents %v; want 3 NATS nodes, 2 coordinators and agents", nats, coords, agents)
	}
	names := map[string]bool{}
	for _, n := range nats {
		cmd := f.Services[n].Command
		if !slices.Contains(cmd, "-js") {
			t.Errorf("%s: JetStream not enabled (-js): %v", n, cmd)
		}
		if c, _ := flag(cmd, "--cluster_name"); c != "lesfarm" {
			t.Errorf("%s: --cluster_name %q, want lesfarm", n, c)
		}
		if c, _ := flag(cmd, "--cluster"); !strings.HasSuffix(c, ":6222") {
			t.Errorf("%s: --cluster %q, want a route listener on 6222", n, c)
		}
		name, _ := flag(cmd, "--name")
		if name == "" || names[name] {
			t.Errorf("%s: server name %q missing or not unique", n, name)
		}
		names[name] = true
		routes, _ := flag(cmd, "--routes")
		var want []string
		for _, o := range nats {
			if o != n {
				want = append(want, "nats://"+o+":6222")
			}
		}
		got := strings.Split(routes, ",")
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: routes %v, want the two other nodes %v", n, got, want)
		}
	}
	allNodes := func(who, url string) {
		var got []string
		for _, u := range strings.Split(url, ",") {
			got = append(got, strings.TrimSuffix(strings.TrimPrefix(u, "nats://"), ":4222"))
		}
		sort.Strings(got)
		if !slices.Equal(got, nats) {
			t.Errorf("%s: --nats-url %q, want every node %v (to fail over)", who, url, nats)
		}
	}
	dbs, coordNames, ports := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, c := range coords {
		s := f.Services[c]
		parses(t, s.Command)
		u, _ := flag(s.Command, "--nats-url")
		allNodes(c, u)
		if r, _ := flag(s.Command, "--stream-replicas"); r != "3" {
			t.Errorf("%s: --stream-replicas %q, want 3", c, r)
		}
		db, _ := flag(s.Command, "--database-url")
		dbs[db] = true
		name, _ := flag(s.Command, "--name")
		if name == "" || coordNames[name] {
			t.Errorf("%s: coordinator name %q missing or not unique", c, name)
		}
		coordNames[name] = true
		for _, p := range s.Ports {
			host, _, _ := strings.Cut(p, ":")
			if ports[host] {
				t.Errorf("%s: host port %s published twice", c, host)
			}
			ports[host] = true
		}
	}
	if len(dbs) != 1 {
		t.Errorf("coordinators use databases %v, want one shared", dbs)
	}
	for _, a := range agents {
		s := f.Services[a]
		parses(t, s.Command)
		u, _ := flag(s.Command, "--nats-url")
		allNodes(a, u)
	}
}

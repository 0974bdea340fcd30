//go:build !race

package expert

const raceBuild = false

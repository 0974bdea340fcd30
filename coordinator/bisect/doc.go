// Package bisect finds the build that caused a regression alert: between
// the alert's last good and first bad build of its lineage, it runs the
// alert's configs on a midpoint build against an endpoint build with the
// A/B gate's machinery and narrows the range until a culprit, "not
// reproduced" or "ambiguous" (docs/bisect.md).
package bisect

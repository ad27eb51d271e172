// Package runner loads models and generates text: scheduler, generation loop, sampling, and the compute interface the architectures are written against.
package runner

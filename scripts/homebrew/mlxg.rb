# Homebrew formula for mlxg, built from source with Go.
#
# There is no tagged release yet, so this is a HEAD-only formula. Install it from a
# local tap (Homebrew no longer installs formulae from a file path):
#
#   brew tap-new mlxg/local
#   cp scripts/homebrew/mlxg.rb "$(brew --repository mlxg/local)/Formula/"
#   brew install --HEAD mlxg/local/mlxg
#   brew test mlxg/local/mlxg      # runs `mlxg --version` and `mlxg doctor` on the GPU
#
# When a release is tagged, add its `url` and `sha256` above `head`.
class Mlxg < Formula
  desc "Pull, run and serve MLX checkpoints like Ollama, with a memory-aware KV cache"
  homepage "https://github.com/mlxg/mlxg"
  head "https://github.com/mlxg/mlxg.git", branch: "main"

  depends_on "go" => :build

  # The Metal backend loads libmlxc (mlx-c) at run time; without it mlxg runs on the
  # CPU. mlx-c, like MLX, exists for Apple Silicon only.
  on_macos do
    on_arm do
      depends_on "mlx-c"
    end
  end

  def install
    # purego binds libmlxc without cgo, so the binary needs no C toolchain.
    ENV["CGO_ENABLED"] = "0"
    ldflags = "-s -w -X main.version=#{version}"
    system "go", "build", *std_go_args(ldflags:), "./cmd/mlxg"
  end

  def caveats
    <<~EOS
      mlxg looks for libmlxc.dylib in $MLXG_MLXC_PATH, next to its executable,
      /opt/homebrew/lib and /usr/local/lib. With a Homebrew prefix elsewhere, set
        export MLXG_MLXC_PATH=#{HOMEBREW_PREFIX}/lib/libmlxc.dylib
      `mlxg doctor` says which backend runs and checks the MLX backend against the CPU:
      every operation and a tiny model of every architecture. `mlxg doctor --report FILE`
      writes its report to FILE, to attach to a bug report.
    EOS
  end

  test do
    assert_match "mlxg version is", shell_output("#{bin}/mlxg --version")
    # `mlxg doctor` is the MLX backend's self-test: every compute operation, and a tiny
    # random model of every architecture, on the GPU against the CPU backend. On Apple
    # Silicon it must check the GPU: MLXG_BACKEND=metal makes it fail when Metal cannot
    # run, rather than pass on the CPU alone. shell_output fails on its non-zero exit.
    if OS.mac? && Hardware::CPU.arm?
      ENV["MLXG_MLXC_PATH"] = "#{HOMEBREW_PREFIX}/lib/libmlxc.dylib"
      ENV["MLXG_BACKEND"] = "metal"
    end
    output = shell_output("#{bin}/mlxg doctor")
    assert_match(/Summary: \d+ passed, 0 failed/, output)
    assert_match "All checks passed.", output
    assert_match(/^  metal +available: /, output) if OS.mac? && Hardware::CPU.arm?
  end
end

"""Shipping end to end: kiln push / pull / package / verify against a real S3-compatible server
(moto, SigV4 checked) with the AWS CLI as the independent client.
Usage: test_ship.py --kiln KILN --artifact TINY.kiln --work DIR --repo REPO"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_harness import DyingProxy, MotoServer, free_port  # noqa: E402

ARGS = None
MOTO = None


def kiln(*args, env=None, timeout=300):
    return subprocess.run([ARGS.kiln] + [str(a) for a in args], env=env or MOTO.env,
                          capture_output=True, text=True, timeout=timeout)


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def load_json(path):
    return json.loads(read(path, "r"))


def save_json(value, path):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)


def tree_bytes(path):
    return {name: read(os.path.join(path, name)) for name in sorted(os.listdir(path))}


def leftovers(dest):
    return [p for p in glob.glob(dest + ".*")]


class ShipTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="ship-", dir=ARGS.work)
        cls.artifact = ARGS.artifact

    def dest(self, name):
        return os.path.join(self.work, name)

    def push(self, prefix, artifact=None, *extra):
        r = kiln("push", artifact or self.artifact, f"s3://kiln-test/{prefix}", *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_push_then_aws_cli_lists_and_downloads_the_same_bytes(self):
        r = self.push("models/tiny")
        self.assertIn("push: ", r.stderr)  # progress output
        listing = MOTO.aws(["s3", "ls", "--recursive", "s3://kiln-test/models/tiny/"])
        local = tree_bytes(self.artifact)
        listed = {line.split()[-1].rsplit("/", 1)[-1]: int(line.split()[2])
                  for line in listing.splitlines()}
        self.assertEqual(listed, {name: len(data) for name, data in local.items()})
        out = self.dest("aws-download")
        MOTO.aws(["s3", "cp", "--recursive", "s3://kiln-test/models/tiny/", out])
        self.assertEqual(tree_bytes(out), local)

    def test_pull_into_a_fresh_dir_loads_generates_and_serves(self):
        self.push("models/serve")
        dest = self.dest("pulled.kiln")
        r = kiln("pull", "s3://kiln-test/models/serve", dest)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tree_bytes(dest), tree_bytes(self.artifact))
        self.assertEqual(leftovers(dest), [])
        gen = kiln("generate", dest, "--prompt-ids", "1 17 300 42 511 256 99", "--max-tokens", "16")
        self.assertEqual(gen.returncode, 0, gen.stderr)
        golden = load_json(os.path.join(ARGS.repo, "tests/data/golden/tiny-llama.json"))
        self.assertEqual(json.loads(gen.stdout)["output_ids"], golden["cases"][1]["greedy_ids"])
        self.serve_and_compare(dest)

    def test_serve_from_s3_pulls_into_the_cache_then_reuses_it(self):
        self.push("models/serve-s3")
        env = dict(MOTO.env, KILN_CACHE_DIR=self.dest("serve-cache"))
        self.serve_and_compare("s3://kiln-test/models/serve-s3", env=env)
        logged = read(os.path.join(self.work, "serve.log"), "r")
        self.assertIn("into the cache", logged)
        self.assertIn("kiln serve: pull: ", logged)  # progress while the bytes move
        self.assertIn("files, done", logged)
        self.serve_and_compare("s3://kiln-test/models/serve-s3", env=env)
        self.assertIn("using cached artifact", read(os.path.join(self.work, "serve.log"), "r"))
        # A cached copy that fails its checksum (same size, one byte changed) is pulled again
        # instead of failing every start.
        artifacts = os.path.join(self.dest("serve-cache"), "artifacts")
        cached = [d for d in os.listdir(artifacts) if not d.startswith(".")]
        self.assertEqual(len(cached), 1, cached)
        weights = os.path.join(artifacts, cached[0], "weights.rank0.bin")
        with open(weights, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
        self.serve_and_compare("s3://kiln-test/models/serve-s3", env=env)
        logged = read(os.path.join(self.work, "serve.log"), "r")
        self.assertIn("failed its check", logged)
        self.assertIn("pulling it again", logged)

    def test_sagemaker_serving_properties_s3url_pulls_the_artifact(self):
        # The LMI way: /opt/ml/model holds only serving.properties; option.s3url names the
        # artifact in S3, which kiln pulls into its cache before serving.
        self.push("models/sagemaker")
        model_dir = self.dest("sagemaker-model")
        os.makedirs(model_dir)
        with open(os.path.join(model_dir, "serving.properties"), "w") as f:
            f.write("engine=Python\noption.s3url=s3://kiln-test/models/sagemaker\n")
        env = dict(MOTO.env, KILN_CACHE_DIR=self.dest("sagemaker-cache"))
        self.serve_and_compare(model_dir, env=env, extra=["--sagemaker"])
        logged = read(os.path.join(self.work, "serve.log"), "r")
        self.assertIn("into the cache", logged)
        self.assertIn("kiln serve: pull: ", logged)  # progress while the bytes move
        self.assertIn("files, done", logged)

    def serve_and_compare(self, dest, env=None, extra=()):
        if kiln("serve", "--help").returncode != 0:
            self.skipTest("this kiln has no serve command")
        port = free_port()
        log = open(os.path.join(self.work, "serve.log"), "w")
        proc = subprocess.Popen([ARGS.kiln, "serve", dest, *extra, "--host", "127.0.0.1",
                                 "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                env=env or MOTO.env)
        try:
            body = None
            for _ in range(300):
                try:
                    req = urllib.request.Request(
                        f"http://127.0.0.1:{port}/v1/completions",
                        data=json.dumps({"prompt": "Mira rang the bell.", "max_tokens": 8,
                                         "temperature": 0}).encode(),
                        headers={"Content-Type": "application/json"})
                    body = json.loads(urllib.request.urlopen(req, timeout=30).read())
                    break
                except OSError:
                    if proc.poll() is not None:
                        break
                    import time
                    time.sleep(0.2)
            self.assertIsNotNone(body, "kiln serve on the pulled artifact did not answer")
            expected = kiln("generate", self.artifact, "--prompt", "Mira rang the bell.",
                            "--max-tokens", "8")
            self.assertEqual(body["choices"][0]["text"], json.loads(expected.stdout)["text"])
            if dest.startswith("s3://") and not any(a == "--served-model-name" for a in extra):
                # served under the artifact's name in the URL, not the cache directory's hash
                models = json.loads(urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/v1/models", timeout=30).read())
                self.assertEqual([m["id"] for m in models["data"]],
                                 [dest.rstrip("/").rsplit("/", 1)[-1]])
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()

    def test_multipart_upload_of_a_file_above_the_part_size(self):
        big = self.dest("big.kiln")
        shutil.copytree(self.artifact, big)
        data = os.urandom(12 * 1024 * 1024 + 12345)  # 3 parts of 5 MiB
        with open(os.path.join(big, "extra.bin"), "wb") as f:
            f.write(data)
        manifest = load_json(os.path.join(big, "manifest.json"))
        manifest["files"].append({"name": "extra.bin", "size": len(data),
                                  "sha256": hashlib.sha256(data).hexdigest()})
        save_json(manifest, os.path.join(big, "manifest.json"))
        self.push("big", big, "--part-size-mb", "5", "--parallel", "3")
        head = json.loads(MOTO.aws(["s3api", "head-object", "--bucket", "kiln-test",
                                    "--key", "big/extra.bin"]))
        self.assertEqual(head["ContentLength"], len(data))
        self.assertTrue(head["ETag"].strip('"').endswith("-3"), head["ETag"])  # a 3-part upload
        MOTO.aws(["s3", "cp", "s3://kiln-test/big/extra.bin", self.dest("extra.aws")])
        self.assertEqual(read(self.dest("extra.aws")), data)
        r = kiln("pull", "s3://kiln-test/big", self.dest("big-pulled"), "--part-size-mb", "5")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tree_bytes(self.dest("big-pulled")), tree_bytes(big))

    def test_corrupted_object_is_detected_by_checksum(self):
        self.push("corrupt")
        weights = read(os.path.join(self.artifact, "weights.rank0.bin"))
        bad = bytearray(weights)
        bad[len(bad) // 2] ^= 0x01  # one bit, same size
        with open(self.dest("bad.bin"), "wb") as f:
            f.write(bad)
        MOTO.aws(["s3", "cp", self.dest("bad.bin"), "s3://kiln-test/corrupt/weights.rank0.bin"])
        dest = self.dest("corrupt.kiln")
        r = kiln("pull", "s3://kiln-test/corrupt", dest)
        self.assertEqual(r.returncode, 1)
        self.assertIn("checksum mismatch for", r.stderr)
        self.assertIn("weights.rank0.bin", r.stderr)
        self.assertIn(hashlib.sha256(bytes(bad)).hexdigest(), r.stderr)
        self.assertFalse(os.path.exists(dest))
        self.assertEqual(leftovers(dest), [])

    def test_sigint_during_a_push_aborts_its_multipart_upload(self):
        big = self.dest("interrupted.kiln")
        shutil.copytree(self.artifact, big)
        with open(os.path.join(big, "extra.bin"), "wb") as f:
            f.write(os.urandom(12 * 1024 * 1024))  # 3 parts of 5 MiB
        manifest = load_json(os.path.join(big, "manifest.json"))
        data = read(os.path.join(big, "extra.bin"))
        manifest["files"].append({"name": "extra.bin", "size": len(data),
                                  "sha256": hashlib.sha256(data).hexdigest()})
        save_json(manifest, os.path.join(big, "manifest.json"))
        # Part 2 is held by the proxy: the push is mid-transfer when the signal comes.
        stderr = self.interrupted_push(big, "interrupted", "PUT partNumber=2",
                                       "--part-size-mb", "5")
        self.assertIn("SIGINT: stopping the transfer", stderr)
        self.assertIn("aborted 1 multipart upload(s)", stderr)
        uploads = MOTO.aws(["s3api", "list-multipart-uploads", "--bucket", "kiln-test",
                            "--prefix", "interrupted/"])
        self.assertNotIn("UploadId", uploads)
        listing = MOTO.aws(["s3", "ls", "s3://kiln-test/interrupted/"], check=False)
        self.assertNotIn("manifest.json", listing)  # nothing a reader would take for an artifact

    def changed_artifact(self, name):
        """The test artifact with one weight byte changed and its manifest updated: what a
        recompiled model looks like to shipping (one file differs, the rest are identical)."""
        path = self.dest(name)
        shutil.copytree(self.artifact, path)
        weights = os.path.join(path, "weights.rank0.bin")
        data = bytearray(read(weights))
        data[len(data) // 2] ^= 0x01
        with open(weights, "wb") as f:
            f.write(data)
        manifest = load_json(os.path.join(path, "manifest.json"))
        for entry in manifest["files"]:
            if entry["name"] == "weights.rank0.bin":
                entry["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
        save_json(manifest, os.path.join(path, "manifest.json"))
        return path

    def keys(self, prefix):
        out = MOTO.aws(["s3api", "list-objects-v2", "--bucket", "kiln-test",
                        "--prefix", prefix + "/"])
        return sorted(o["Key"] for o in json.loads(out).get("Contents", [])) if out.strip() else []

    def plain_bytes(self, key):
        path = self.dest("aws-" + key.replace("/", "_"))
        MOTO.aws(["s3", "cp", f"s3://kiln-test/{key}", path])
        return read(path)

    def interrupted_push(self, artifact, prefix, stall, *extra):
        """Pushes with the request `stall` held by a proxy, then sends SIGINT once it is held;
        checks the push failed as interrupted and returns its stderr."""
        proxy = DyingProxy(MOTO.port, victim="no object has this name", stall=stall)
        try:
            env = dict(MOTO.env, AWS_ENDPOINT_URL=proxy.url)
            proc = subprocess.Popen([ARGS.kiln, "push", artifact, f"s3://kiln-test/{prefix}",
                                     "--parallel", "1", *extra], env=env,
                                    stderr=subprocess.PIPE, text=True)
            self.assertTrue(proxy.stalled.wait(120), f"the push never sent {stall}")
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=120)
        finally:
            proxy.release.set()
            proxy.close()
        self.assertEqual(proc.returncode, 1, stderr)
        self.assertIn("interrupted by SIGINT or SIGTERM", stderr)
        return stderr

    def test_a_re_push_interrupted_before_its_manifest_keeps_the_old_artifact(self):
        self.push("repush")
        old_files = tree_bytes(self.artifact)
        new = self.changed_artifact("repush-new.kiln")
        new_files = tree_bytes(new)
        stderr = self.interrupted_push(new, "repush", "PUT repush/manifest.json")
        self.assertIn("5 of 6 files unchanged, 1 to upload", stderr)
        self.assertIn("push to s3://kiln-test/repush: writing manifest.json: interrupted", stderr)
        # kiln and the AWS CLI both still read the old artifact.
        r = kiln("pull", "s3://kiln-test/repush", self.dest("repush-old"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tree_bytes(self.dest("repush-old")), old_files)
        self.assertEqual(self.plain_bytes("repush/weights.rank0.bin"),
                         old_files["weights.rank0.bin"])
        new_sha = hashlib.sha256(new_files["weights.rank0.bin"]).hexdigest()
        self.assertIn(f"repush/.kiln/objects/{new_sha}", self.keys("repush"))
        # The same push again resumes: the staged file is not uploaded twice.
        r = self.push("repush", new)
        self.assertIn("5 of 6 files unchanged, 0 to upload, 1 staged by an earlier interrupted "
                      "push", r.stderr)
        r = kiln("pull", "s3://kiln-test/repush", self.dest("repush-new"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tree_bytes(self.dest("repush-new")), new_files)
        self.assertEqual(self.plain_bytes("repush/weights.rank0.bin"),
                         new_files["weights.rank0.bin"])
        self.assertEqual(self.keys("repush"), sorted("repush/" + n for n in new_files))
        # Nothing changed: only the manifest is written.
        r = self.push("repush", new)
        self.assertIn("6 of 6 files unchanged, 0 to upload", r.stderr)

    def test_a_re_push_interrupted_after_its_manifest_serves_the_new_artifact(self):
        self.push("repush2")
        old_files = tree_bytes(self.artifact)
        new = self.changed_artifact("repush2-new.kiln")
        new_files = tree_bytes(new)
        # Held: the server-side copy of the changed file to its plain key.
        stderr = self.interrupted_push(new, "repush2", "PUT repush2/weights.rank0.bin")
        self.assertIn("run the same kiln push again to finish", stderr)
        r = kiln("pull", "s3://kiln-test/repush2", self.dest("repush2-mid"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tree_bytes(self.dest("repush2-mid")), new_files)  # from the staged copy
        self.assertEqual(self.plain_bytes("repush2/weights.rank0.bin"),
                         old_files["weights.rank0.bin"])
        r = self.push("repush2", new)
        self.assertEqual(self.plain_bytes("repush2/weights.rank0.bin"),
                         new_files["weights.rank0.bin"])
        self.assertEqual(self.keys("repush2"), sorted("repush2/" + n for n in new_files))
        r = kiln("pull", "s3://kiln-test/repush2", self.dest("repush2-new"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tree_bytes(self.dest("repush2-new")), new_files)

    def test_object_shorter_than_its_manifest_says_what_to_do(self):
        # The manifest lists the old size, the object was replaced by a shorter one: S3 answers
        # the byte range with 416, which kiln explains instead of printing it raw.
        self.push("short")
        with open(self.dest("short.bin"), "wb") as f:
            f.write(b"x" * 10)
        MOTO.aws(["s3", "cp", self.dest("short.bin"), "s3://kiln-test/short/weights.rank0.bin"])
        dest = self.dest("short.kiln")
        r = kiln("pull", "s3://kiln-test/short", dest, "--retries", "1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("GET s3://kiln-test/short/weights.rank0.bin: the object is shorter", r.stderr)
        self.assertIn("push the artifact again", r.stderr)
        self.assertFalse(os.path.exists(dest))

    def test_a_damaged_tarball_is_named_by_its_s3_url(self):
        with open(self.dest("junk.tar.gz"), "wb") as f:
            f.write(b"\x1f\x8b" + b"not a gzip stream" * 10)
        MOTO.aws(["s3", "cp", self.dest("junk.tar.gz"), "s3://kiln-test/junk/model.tar.gz"])
        dest = self.dest("junk.kiln")
        r = kiln("pull", "s3://kiln-test/junk/model.tar.gz", dest)
        self.assertEqual(r.returncode, 1)
        self.assertIn("s3://kiln-test/junk/model.tar.gz", r.stderr)
        self.assertNotIn(".pull-", r.stderr)
        self.assertFalse(os.path.exists(dest))

    def test_wrong_credentials_give_a_clear_error(self):
        self.push("creds")
        wrong_secret = MOTO.base_env(MOTO.env["AWS_ACCESS_KEY_ID"], "not-the-secret")
        r = kiln("pull", "s3://kiln-test/creds", self.dest("c1"), env=wrong_secret)
        self.assertEqual(r.returncode, 1)
        self.assertIn("was refused: HTTP 403 SignatureDoesNotMatch", r.stderr)
        self.assertIn("from environment (AWS_ACCESS_KEY_ID)", r.stderr)
        unknown = MOTO.base_env("AKIAUNKNOWNKEY000000", "x")
        r = kiln("push", self.artifact, "s3://kiln-test/creds2", env=unknown)
        self.assertEqual(r.returncode, 1)
        self.assertIn("HTTP 403 InvalidAccessKeyId", r.stderr)
        none = {k: v for k, v in MOTO.env.items() if not k.startswith("AWS_ACCESS")
                and not k.startswith("AWS_SECRET")}
        none["HOME"] = self.work
        r = kiln("pull", "s3://kiln-test/creds", self.dest("c3"), env=none)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", r.stderr)
        for d in ("c1", "c3"):
            self.assertFalse(os.path.exists(self.dest(d)))

    def test_server_going_away_mid_transfer_retries_then_fails_cleanly(self):
        self.push("dying")
        proxy = DyingProxy(MOTO.port, "weights.rank0.bin")
        try:
            env = dict(MOTO.env, AWS_ENDPOINT_URL=proxy.url)
            dest = self.dest("dying.kiln")
            r = kiln("pull", "s3://kiln-test/dying", dest, "--retries", "3", env=env, timeout=120)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("retrying in", r.stderr)  # the drop was retried...
            self.assertIn("(attempt 2 of 3)", r.stderr)
            self.assertIn("failed after 3 attempt(s)", r.stderr)  # ...then a clear failure
            self.assertTrue(proxy.dead)
            self.assertFalse(os.path.exists(dest))  # nothing half-written that could load
            self.assertEqual(leftovers(dest), [])
            gen = kiln("generate", dest, "--prompt-ids", "1", "--max-tokens", "1")
            self.assertNotEqual(gen.returncode, 0)
        finally:
            proxy.close()

    def test_pull_to_cache_reuses_the_cache_and_survives_the_store_going_away(self):
        self.push("cached")
        cache = self.dest("cache")
        # Through a proxy, so the store can go away at the same endpoint for the third start.
        proxy = DyingProxy(MOTO.port, victim="no object has this name")
        env = dict(MOTO.env, AWS_ENDPOINT_URL=proxy.url)
        pull = ["pull", "s3://kiln-test/cached", "--to-cache", "--cache-dir", cache]
        try:
            first = kiln(*pull, env=env)
            self.assertEqual(first.returncode, 0, first.stderr)
            path = first.stdout.strip()
            manifest = read(os.path.join(self.artifact, "manifest.json"))
            self.assertEqual(path, os.path.join(cache, "artifacts",
                                                hashlib.sha256(manifest).hexdigest()))
            self.assertEqual(tree_bytes(path), tree_bytes(self.artifact))
            self.assertIn("pulling s3://kiln-test/cached into the cache", first.stderr)
            downloads = sum(1 for m, p in proxy.requests if m == "GET")
            second = kiln(*pull, env=env)
            self.assertEqual(second.stdout.strip(), path)
            self.assertIn("using cached artifact", second.stderr)
            # The second start fetched the manifest only.
            self.assertEqual(sum(1 for m, p in proxy.requests if m == "GET"), downloads + 1)
        finally:
            proxy.close()
        third = kiln(*pull, "--retries", "1", env=env)
        self.assertEqual(third.returncode, 0, third.stderr)
        self.assertEqual(third.stdout.strip(), path)
        self.assertIn("using the artifact pulled from it earlier", third.stderr)

    def test_package_upload_and_pull_the_tarball(self):
        tarball = self.dest("model.tar.gz")
        r = kiln("package", self.artifact, "-o", tarball)
        self.assertEqual(r.returncode, 0, r.stderr)
        listing = subprocess.run(["tar", "tzf", tarball], capture_output=True, text=True).stdout
        self.assertEqual(sorted(listing.split()), sorted(os.listdir(self.artifact)))
        MOTO.aws(["s3", "cp", tarball, "s3://kiln-test/sagemaker/model.tar.gz"])
        dest = self.dest("from-tarball")
        r = kiln("pull", "s3://kiln-test/sagemaker/model.tar.gz", dest)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tree_bytes(dest), tree_bytes(self.artifact))


class VerifyTest(unittest.TestCase):
    """kiln verify passes on a good artifact, fails with a readable diff otherwise."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="verify-", dir=ARGS.work)
        cls.golden = os.path.join(cls.work, "golden.json")
        r = kiln("verify", ARGS.artifact, "--write", cls.golden, "--prompt-ids",
                 "1; 1 17 300 42 511 256 99", "--max-tokens", "12", "--top-k", "8", env=os.environ)
        assert r.returncode == 0, r.stderr

    def verify(self, golden):
        return kiln("verify", ARGS.artifact, "--golden", golden, env=os.environ)

    def edited(self, edit):
        g = load_json(self.golden)
        edit(g)
        path = os.path.join(self.work, f"edited-{id(edit)}.json")
        save_json(g, path)
        return path

    def test_good_artifact_passes_its_own_and_the_transformers_golden(self):
        r = self.verify(self.golden)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("verify: PASS (2 cases)", r.stdout)
        r = self.verify(os.path.join(ARGS.repo, "tests/data/golden/tiny-llama.json"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("case 'case1': ok, 16 ids match", r.stdout)

    def test_one_changed_id_fails_with_the_first_differing_position(self):
        def change(g):
            ids = g["cases"][1]["expected_ids"]
            self.original = ids[5]
            ids[5] = (ids[5] + 1) % g["vocab_size"]
        r = self.verify(self.edited(change))
        self.assertEqual(r.returncode, 1)
        self.assertIn("case 'case1': FAIL", r.stdout)
        self.assertIn(f"first differing id at output index 5: expected {(self.original + 1) % 512}, "
                      f"got {self.original}", r.stdout)
        self.assertIn("verify: FAIL (1 of 2 cases differ)", r.stdout)

    def test_logits_out_of_tolerance_fail_with_the_max_diff(self):
        def shift(g):
            row = g["cases"][0]["logits"][3]
            row["values"][1] += 0.01
            self.where = (row["position"], row["ids"][1])
        r = self.verify(self.edited(shift))
        self.assertEqual(r.returncode, 1)
        self.assertIn("> tolerance 0.0001", r.stdout)
        self.assertIn(f"max logit diff at position {self.where[0]}, token {self.where[1]}",
                      r.stdout)

    def test_a_golden_for_another_model_is_an_error(self):
        r = self.verify(self.edited(lambda g: g.update(vocab_size=1000)))
        self.assertEqual(r.returncode, 2)
        self.assertIn("vocab_size is 1000 but the artifact's is 512", r.stderr)


def main():
    global ARGS, MOTO
    p = argparse.ArgumentParser()
    for flag in ("--kiln", "--artifact", "--work", "--repo"):
        p.add_argument(flag, required=True)
    ARGS, rest = p.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    MOTO = MotoServer(ARGS.work).start()
    try:
        result = unittest.main(argv=[sys.argv[0]] + rest, verbosity=2, exit=False).result
    finally:
        MOTO.stop()
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()

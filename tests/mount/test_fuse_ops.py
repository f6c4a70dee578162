# SPDX-License-Identifier: Apache-2.0
"""The FUSE requests a mount answers (src/fuse), seen from the programs
that send them: extended attributes listed (empty) without -o xattr, and
`ls -l` sending no attribute request per file."""
import os
import re
import subprocess

import numpy as np
import pytest

import safetensors_writer as st
from conftest import MODELFS, is_mounted, mounted, unmount
from test_cli import small_model


def test_listxattr_answers_an_empty_list_without_the_xattr_option(tmp):
    model = small_model(tmp)
    with mounted(model) as mnt:
        assert os.listxattr(mnt / "enc" / "w") == []
        getfattr = subprocess.run(["getfattr", "-d", "-R", str(mnt)], capture_output=True, text=True)
        assert getfattr.returncode == 0 and getfattr.stdout == "" and getfattr.stderr == "", getfattr
        tar = subprocess.run(["tar", "--xattrs", "-cf", "/dev/null", "-C", str(mnt), "."],
                             capture_output=True, text=True)
        assert tar.returncode == 0 and tar.stderr == "", tar.stderr
        with pytest.raises(OSError):  # getxattr still ENOSYS: the kernel stops asking
            os.getxattr(mnt / "enc" / "w", "user.modelfs.dtype")
    with mounted(model, "-o", "xattr") as mnt:
        assert sorted(os.listxattr(mnt / "enc" / "w")) == ["user.modelfs.dtype", "user.modelfs.shape"]
        assert os.getxattr(mnt / "enc" / "w", "user.modelfs.dtype") == b"float32"


def test_ls_l_sends_no_attribute_request_per_file(tmp):
    tensors = {f"layer{i}.w": np.zeros(2, np.float32) for i in range(40)}
    model = st.write(tmp / "many.safetensors", tensors)
    mnt = tmp / "mnt"
    mnt.mkdir()
    log = tmp / "debug.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(MODELFS), "-d", "-s", str(model), str(mnt)], stdout=out, stderr=out)
    try:
        for _ in range(200):
            if is_mounted(mnt):
                break
            assert process.poll() is None, log.read_text()[-2000:]
            subprocess.run(["sleep", "0.05"])
        subprocess.run(["ls", "-lR", str(mnt)], check=True, capture_output=True)
        subprocess.run(["ls", "-lR", str(mnt)], check=True, capture_output=True)
    finally:
        unmount(mnt)
        process.wait(timeout=30)
    requests = re.findall(r"opcode: ((?:GET|LIST)XATTR)", log.read_text())
    # At most the first GETXATTR (answered ENOSYS, after which the kernel
    # stops asking); 40 folders of files list nothing.
    assert len(requests) <= 2, requests

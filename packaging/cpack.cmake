# The Debian package: `cpack -G DEB` in the build folder.
set(CPACK_PACKAGE_NAME "modelfs")
set(CPACK_PACKAGE_VENDOR "modelfs developers")
set(CPACK_PACKAGE_CONTACT "modelfs developers <modelfs@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Runtime libraries are found by dpkg-shlibdeps; the fuse3 tools are needed
# for fusermount3 and mount.fuse3.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3")
set(CPACK_GENERATOR "DEB")
include(CPack)

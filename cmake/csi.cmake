# SPDX-License-Identifier: Apache-2.0
# modelfs-csi, the Kubernetes CSI node plugin (src/csi, docs/kubernetes.md):
# built when MODELFS_BUILD_CSI is on (scripts/test.sh and the Debian package
# turn it on; the quick start leaves it off, so building modelfs needs no
# gRPC). Its layer links no other layer of src/: the plugin runs the modelfs
# program, one daemon a volume, so a mount is served by the same code as a
# user's and the daemons outlive the plugin.
pkg_check_modules(GRPCPP REQUIRED IMPORTED_TARGET grpc++>=1.30)
pkg_check_modules(PROTOBUF REQUIRED IMPORTED_TARGET protobuf>=3.12)
find_program(MODELFS_PROTOC protoc REQUIRED)
find_program(MODELFS_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# The CSI messages and services, generated from src/csi/csi.proto. Compiled
# apart from the layer, without the project's warnings (the code is protoc's).
set(MODELFS_CSI_GENERATED ${CMAKE_CURRENT_BINARY_DIR}/generated/csi)
set(MODELFS_CSI_PROTO_OUT ${MODELFS_CSI_GENERATED}/csi.pb.cc ${MODELFS_CSI_GENERATED}/csi.pb.h
    ${MODELFS_CSI_GENERATED}/csi.grpc.pb.cc ${MODELFS_CSI_GENERATED}/csi.grpc.pb.h)
add_custom_command(OUTPUT ${MODELFS_CSI_PROTO_OUT}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${MODELFS_CSI_GENERATED}
  COMMAND ${MODELFS_PROTOC} -I ${CMAKE_CURRENT_SOURCE_DIR}/src/csi --cpp_out=${MODELFS_CSI_GENERATED}
          --grpc_out=${MODELFS_CSI_GENERATED} --plugin=protoc-gen-grpc=${MODELFS_GRPC_CPP_PLUGIN}
          ${CMAKE_CURRENT_SOURCE_DIR}/src/csi/csi.proto
  DEPENDS src/csi/csi.proto
  COMMENT "Generating the CSI messages and services")
add_library(modelfs_csi_proto OBJECT ${MODELFS_CSI_GENERATED}/csi.pb.cc ${MODELFS_CSI_GENERATED}/csi.grpc.pb.cc)
target_include_directories(modelfs_csi_proto SYSTEM PUBLIC ${MODELFS_CSI_GENERATED})
target_link_libraries(modelfs_csi_proto PUBLIC PkgConfig::GRPCPP PkgConfig::PROTOBUF)

modelfs_layer(csi
  SOURCES src/csi/request.cpp src/csi/mounts.cpp src/csi/records.cpp src/csi/volumes.cpp
          src/csi/services.cpp
  LIBS modelfs_csi_proto nlohmann_json::nlohmann_json spdlog::spdlog)
target_compile_definitions(modelfs_csi PRIVATE MODELFS_CSI_VERSION="${PROJECT_VERSION}")

add_executable(modelfs-csi src/csi/main.cpp)
target_compile_options(modelfs-csi PRIVATE ${MODELFS_WARNINGS})
target_link_libraries(modelfs-csi PRIVATE modelfs_csi modelfs_csi_proto spdlog::spdlog)
target_compile_definitions(modelfs-csi PRIVATE MODELFS_CSI_VERSION="${PROJECT_VERSION}")
install(TARGETS modelfs-csi RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES man/modelfs-csi.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
